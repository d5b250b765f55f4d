"""jobs: the members whose admission refused the job's copy, and each one's words

Revision ID: 0015_job_refused_by
Revises: 0014_jobs_wake_scheduler
Create Date: 2026-12-06
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0015_job_refused_by'
down_revision = '0014_jobs_wake_scheduler'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('refused', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()),
                                                                      'postgresql'),
                                    server_default='{}', nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.drop_column('refused')
