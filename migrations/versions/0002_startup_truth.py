"""startup truth: placements Starting until their pods are ready, startup evictions, pods per placement

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')
JOB_STATES = "state IN ('Queued', 'Admitted', 'Dispatching', 'Starting', 'Running', 'Succeeded', 'Failed', 'Cancelled')"
OLD_JOB_STATES = "state IN ('Queued', 'Admitted', 'Dispatching', 'Running', 'Succeeded', 'Failed', 'Cancelled')"
PLACEMENT_STATES = ("state IN ('Decided', 'Applying', 'Starting', 'Running', 'Succeeded', 'Failed', 'Deleting', "
                    "'Deleted')")
OLD_PLACEMENT_STATES = ("state IN ('Decided', 'Applying', 'Applied', 'Running', 'Succeeded', 'Failed', 'Deleting', "
                        "'Deleted')")


def upgrade() -> None:
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('placement_used', JSON, nullable=False, server_default='{}'))
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('ck_jobs_state'), type_='check')
        batch_op.create_check_constraint(batch_op.f('ck_jobs_state'), JOB_STATES)
        batch_op.add_column(sa.Column('evictions', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('requeue_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('avoid', JSON, nullable=False, server_default='{}'))
    with op.batch_alter_table('placements', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('ck_placements_state'), type_='check')
        batch_op.add_column(sa.Column('applied_at', sa.DateTime(timezone=True), nullable=True))
    # what was Applied (on the member, pods not known ready) is Starting; its startup clock starts now
    op.execute("UPDATE placements SET state = 'Starting', applied_at = CURRENT_TIMESTAMP WHERE state = 'Applied'")
    op.execute("UPDATE placements SET applied_at = COALESCE(started_at, created_at) "
               "WHERE state = 'Running' AND applied_at IS NULL")
    with op.batch_alter_table('placements', schema=None) as batch_op:
        batch_op.create_check_constraint(batch_op.f('ck_placements_state'), PLACEMENT_STATES)


def downgrade() -> None:
    with op.batch_alter_table('placements', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('ck_placements_state'), type_='check')
    op.execute("UPDATE placements SET state = 'Applied' WHERE state = 'Starting'")
    with op.batch_alter_table('placements', schema=None) as batch_op:
        batch_op.create_check_constraint(batch_op.f('ck_placements_state'), OLD_PLACEMENT_STATES)
        batch_op.drop_column('applied_at')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('ck_jobs_state'), type_='check')
    op.execute("UPDATE jobs SET state = 'Dispatching' WHERE state = 'Starting'")
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_check_constraint(batch_op.f('ck_jobs_state'), OLD_JOB_STATES)
        batch_op.drop_column('avoid')
        batch_op.drop_column('requeue_at')
        batch_op.drop_column('evictions')
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.drop_column('placement_used')
