"""pull members: a cluster's mode (push: the broker calls the member; pull: its agent calls the broker) and the
hash of a pull member's agent token

Revision ID: 0010_pull_members
Revises: 0009_cluster_uid
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0010_pull_members'
down_revision = '0009_cluster_uid'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('clusters', schema=None) as batch_op:
        batch_op.add_column(sa.Column('mode', sa.String(length=8), server_default='push', nullable=False))
        batch_op.add_column(sa.Column('agent_token_hash', sa.String(length=64), nullable=True))
        batch_op.create_unique_constraint(batch_op.f('uq_clusters_agent_token_hash'), ['agent_token_hash'])
        batch_op.create_check_constraint(batch_op.f('ck_clusters_mode'), "mode IN ('push', 'pull')")


def downgrade() -> None:
    with op.batch_alter_table('clusters', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('ck_clusters_mode'), type_='check')
        batch_op.drop_constraint(batch_op.f('uq_clusters_agent_token_hash'), type_='unique')
        batch_op.drop_column('agent_token_hash')
        batch_op.drop_column('mode')
