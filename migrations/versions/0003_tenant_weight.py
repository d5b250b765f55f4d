"""tenant weight: tenants share the federation by weight, each tenant's queues share its part

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.add_column(sa.Column('weight', sa.Float(), nullable=False, server_default='1'))
        batch_op.create_check_constraint(batch_op.f('ck_tenants_weight'), 'weight > 0')


def downgrade() -> None:
    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('ck_tenants_weight'), type_='check')
        batch_op.drop_column('weight')
