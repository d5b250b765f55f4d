"""pods' device demands: the claim templates a job brings, the demand shapes the inventory counts per node, what
devices each node holds for them, which placements' claims hold a device, and admins' device-class quota mappings

Revision ID: 0020_device_demands
Revises: 0019_devices
Create Date: 2026-12-07
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0020_device_demands'
down_revision = '0019_devices'
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def upgrade() -> None:
    op.add_column('nodes', sa.Column('device_use', JSON, nullable=False, server_default='{}'))
    op.add_column('devices', sa.Column('held_for', JSON, nullable=False, server_default='[]'))
    op.add_column('jobs', sa.Column('claim_templates', JSON, nullable=False, server_default='[]'))
    op.create_table('device_shapes',
                    sa.Column('key', sa.String(length=64), nullable=False),
                    sa.Column('demand', JSON, nullable=False),
                    sa.Column('description', sa.Text(), nullable=False),
                    sa.Column('counted', sa.Boolean(), nullable=False),
                    sa.PrimaryKeyConstraint('key', name=op.f('pk_device_shapes')))
    op.create_table('device_class_mappings',
                    sa.Column('resource', sa.String(length=253), nullable=False),
                    sa.Column('device_classes', JSON, nullable=False),
                    sa.PrimaryKeyConstraint('resource', name=op.f('pk_device_class_mappings')))


def downgrade() -> None:
    op.drop_table('device_class_mappings')
    op.drop_table('device_shapes')
    op.drop_column('jobs', 'claim_templates')
    op.drop_column('devices', 'held_for')
    op.drop_column('nodes', 'device_use')
