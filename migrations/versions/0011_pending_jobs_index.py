"""pending jobs: a partial index of the jobs waiting for a placement, which the scheduler reads every cycle

Revision ID: 0011_pending_jobs_index
Revises: 0010_pull_members
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0011_pending_jobs_index'
down_revision = '0010_pull_members'
branch_labels = None
depends_on = None

PENDING = sa.text("state = 'Queued' AND cancel_requested_at IS NULL")


def upgrade() -> None:
    op.create_index('ix_jobs_pending', 'jobs', ['state', 'id'], sqlite_where=PENDING, postgresql_where=PENDING)


def downgrade() -> None:
    op.drop_index('ix_jobs_pending', table_name='jobs')
