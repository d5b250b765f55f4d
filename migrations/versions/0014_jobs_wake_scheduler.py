"""jobs: on PostgreSQL, a statement trigger that wakes the scheduler when jobs are inserted

The NOTIFY is sent at the commit of the transaction that inserted them, and not at all if it rolls back; a
submission no longer spends a round trip of its own on it. The channel and payload are those the replicas'
listener reads (broker.services.wakeups.CHANNEL, the scheduler's loop name). SQLite has no NOTIFY: one process
runs everything there and wakes its scheduler itself.

Revision ID: 0014_jobs_wake_scheduler
Revises: 0013_job_placement_spec
Create Date: 2026-12-06
"""
from alembic import op

revision = '0014_jobs_wake_scheduler'
down_revision = '0013_job_placement_spec'
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        return
    op.execute("""
        CREATE FUNCTION archipelago_wake_scheduler() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('archipelago_wake', 'scheduler');
            RETURN NULL;
        END $$""")
    op.execute("CREATE TRIGGER jobs_wake_scheduler AFTER INSERT ON jobs "
               "FOR EACH STATEMENT EXECUTE FUNCTION archipelago_wake_scheduler()")


def downgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        return
    op.execute("DROP TRIGGER jobs_wake_scheduler ON jobs")
    op.execute("DROP FUNCTION archipelago_wake_scheduler()")
