"""jobs: the runtime a job declares (archipelago.io/expected-runtime) and the bound its Jobs' activeDeadlineSeconds
set, and its forecast; queues: a default runtime

Revision ID: 0017_forecast
Revises: 0016_tenant_pod_security
Create Date: 2026-12-07
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0017_forecast'
down_revision = '0016_tenant_pod_security'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('declared_runtime', sa.Float(), nullable=True))
        batch.add_column(sa.Column('runtime_bound', sa.Float(), nullable=True))
        batch.add_column(sa.Column('forecast', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()),
                                                                      'postgresql'), nullable=True))
    with op.batch_alter_table('queues') as batch:
        batch.add_column(sa.Column('default_runtime', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('queues') as batch:
        batch.drop_column('default_runtime')
    with op.batch_alter_table('jobs') as batch:
        batch.drop_column('forecast')
        batch.drop_column('runtime_bound')
        batch.drop_column('declared_runtime')
