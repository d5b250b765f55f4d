"""tenants: the Pod Security level their pods are held to, and the namespaces the broker may adopt on members

Revision ID: 0016_tenant_pod_security
Revises: 0015_job_refused_by
Create Date: 2026-12-07
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0016_tenant_pod_security'
down_revision = '0015_job_refused_by'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tenants') as batch:
        batch.add_column(sa.Column('pod_security', sa.String(length=16), server_default='baseline', nullable=False))
        batch.add_column(sa.Column('adoptable_namespaces',
                                   sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'),
                                   server_default='[]', nullable=False))
        batch.create_check_constraint(batch.f('ck_tenants_pod_security'), "pod_security IN ('privileged', 'baseline', 'restricted')")


def downgrade() -> None:
    with op.batch_alter_table('tenants') as batch:
        batch.drop_constraint(batch.f('ck_tenants_pod_security'), type_='check')
        batch.drop_column('adoptable_namespaces')
        batch.drop_column('pod_security')
