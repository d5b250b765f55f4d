"""job listings: indexes that match each filter in id order, so a page reads 50 rows, not every match;
retention: finished jobs by age

Revision ID: 0007_job_listing_indexes
Revises: 0006_leader_lease
Create Date: 2026-12-01
"""
from alembic import op

revision = '0007_job_listing_indexes'
down_revision = '0006_leader_lease'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index('ix_jobs_tenant_id_state', table_name='jobs')
    op.create_index('ix_jobs_tenant_id_id', 'jobs', ['tenant_id', 'id'])
    op.create_index('ix_jobs_tenant_id_state_id', 'jobs', ['tenant_id', 'state', 'id'])
    op.create_index('ix_jobs_state_id', 'jobs', ['state', 'id'])
    op.create_index('ix_jobs_queue_id_id', 'jobs', ['queue_id', 'id'])
    op.create_index('ix_jobs_finished_at', 'jobs', ['finished_at'])


def downgrade() -> None:
    op.drop_index('ix_jobs_finished_at', table_name='jobs')
    op.drop_index('ix_jobs_queue_id_id', table_name='jobs')
    op.drop_index('ix_jobs_state_id', table_name='jobs')
    op.drop_index('ix_jobs_tenant_id_state_id', table_name='jobs')
    op.drop_index('ix_jobs_tenant_id_id', table_name='jobs')
    op.create_index('ix_jobs_tenant_id_state', 'jobs', ['tenant_id', 'state'])
