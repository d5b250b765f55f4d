"""reclaim within the cohort: a queue takes back, per its policy, what its tenant's other queues borrowed

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('queues', schema=None) as batch_op:
        batch_op.add_column(sa.Column('reclaim_within_cohort', sa.String(length=16), nullable=False,
                                      server_default='Never'))
        batch_op.create_check_constraint(batch_op.f('ck_queues_reclaim_within_cohort'),
                                         "reclaim_within_cohort IN ('Never', 'LowerPriority', 'Any')")


def downgrade() -> None:
    with op.batch_alter_table('queues', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('ck_queues_reclaim_within_cohort'), type_='check')
        batch_op.drop_column('reclaim_within_cohort')
