"""topology discovery by recipe: the admins' recipes, each cluster's choice (auto by default), whether its tree is
written back to it as HyperNode objects, and a topology source long enough to name the recipe (labels:<recipe>)

Revision ID: 0018_topology_recipes
Revises: 0017_forecast
Create Date: 2026-12-07
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0018_topology_recipes'
down_revision = '0017_forecast'
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def upgrade() -> None:
    op.create_table('topology_recipes',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=40), nullable=False),
    sa.Column('tiers', JSON, nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_topology_recipes')),
    sa.UniqueConstraint('name', name=op.f('uq_topology_recipes_name'))
    )
    with op.batch_alter_table('clusters') as batch:
        batch.add_column(sa.Column('topology_recipe', sa.String(length=40), nullable=False, server_default='auto'))
        batch.add_column(sa.Column('topology_write_back', sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.alter_column('hypernode_source', type_=sa.String(length=64), existing_type=sa.String(length=16),
                           existing_nullable=True)


def downgrade() -> None:
    with op.batch_alter_table('clusters') as batch:
        batch.alter_column('hypernode_source', type_=sa.String(length=16), existing_type=sa.String(length=64),
                           existing_nullable=True)
        batch.drop_column('topology_write_back')
        batch.drop_column('topology_recipe')
    op.drop_table('topology_recipes')
