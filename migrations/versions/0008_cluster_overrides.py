"""cluster overrides: admin rules that rewrite a JobSet on its way to the clusters they target; each
placement keeps the names of the rules its copy was rendered with

Revision ID: 0008_cluster_overrides
Revises: 0007_job_listing_indexes
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0008_cluster_overrides'
down_revision = '0007_job_listing_indexes'
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def upgrade() -> None:
    op.create_table('cluster_overrides',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('apply_order', sa.Integer(), nullable=False),
    sa.Column('cluster', sa.String(length=63), nullable=True),
    sa.Column('selector', sa.Text(), nullable=True),
    sa.Column('changes', JSON, nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_cluster_overrides')),
    sa.UniqueConstraint('name', name=op.f('uq_cluster_overrides_name'))
    )
    with op.batch_alter_table('placements') as batch:
        batch.add_column(sa.Column('overrides', JSON, nullable=False, server_default='[]'))


def downgrade() -> None:
    with op.batch_alter_table('placements') as batch:
        batch.drop_column('overrides')
    op.drop_table('cluster_overrides')
