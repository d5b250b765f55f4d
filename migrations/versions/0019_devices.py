"""members' devices as Dynamic Resource Allocation describes them: devices, device classes, shared counter sets

Revision ID: 0019_devices
Revises: 0018_topology_recipes
Create Date: 2026-12-07
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0019_devices'
down_revision = '0018_topology_recipes'
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def _table(name: str, *columns: sa.Column) -> None:
    op.create_table(name,
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('cluster_id', sa.Integer(), nullable=False),
    *columns,
    sa.ForeignKeyConstraint(['cluster_id'], ['clusters.id'], name=op.f(f'fk_{name}_cluster_id_clusters'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f(f'pk_{name}')),
    sa.UniqueConstraint('cluster_id', 'name', name=op.f(f'uq_{name}_cluster_id_name'))
    )
    op.create_index(op.f(f'ix_{name}_cluster_id'), name, ['cluster_id'], unique=False)


def upgrade() -> None:
    _table('devices',
           sa.Column('name', sa.String(length=1024), nullable=False),
           sa.Column('driver', sa.String(length=253), nullable=False),
           sa.Column('pool', sa.String(length=512), nullable=False),
           sa.Column('device', sa.String(length=128), nullable=False),
           sa.Column('generation', sa.BigInteger(), nullable=False),
           sa.Column('node', sa.String(length=253), nullable=True),
           sa.Column('attributes', JSON, nullable=False),
           sa.Column('capacity', JSON, nullable=False),
           sa.Column('consumes', JSON, nullable=False),
           sa.Column('taints', JSON, nullable=False),
           sa.Column('allocated_by', JSON, nullable=False))
    _table('device_classes',
           sa.Column('name', sa.String(length=253), nullable=False),
           sa.Column('selectors', JSON, nullable=False))
    _table('counter_sets',
           sa.Column('name', sa.String(length=1024), nullable=False),
           sa.Column('driver', sa.String(length=253), nullable=False),
           sa.Column('pool', sa.String(length=512), nullable=False),
           sa.Column('counters', JSON, nullable=False))


def downgrade() -> None:
    for name in ('counter_sets', 'device_classes', 'devices'):
        op.drop_index(op.f(f'ix_{name}_cluster_id'), table_name=name)
        op.drop_table(name)
