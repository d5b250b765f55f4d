"""fair-share preemption: a tenant may opt in to preempting other tenants' work to reach its fair share

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.add_column(sa.Column('fair_share_preemption', sa.String(length=32), nullable=False,
                                      server_default='Never'))
        batch_op.create_check_constraint(batch_op.f('ck_tenants_fair_share_preemption'),
                                         "fair_share_preemption IN ('Never', 'LessThanOrEqualToFinalShare')")


def downgrade() -> None:
    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('ck_tenants_fair_share_preemption'), type_='check')
        batch_op.drop_column('fair_share_preemption')
