"""cluster identity: the uid of the member's kube-system namespace, unique, so one member cannot be registered
twice under two URLs or names

Revision ID: 0009_cluster_uid
Revises: 0008_cluster_overrides
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0009_cluster_uid'
down_revision = '0008_cluster_overrides'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('clusters', schema=None) as batch_op:
        batch_op.add_column(sa.Column('uid', sa.String(length=64), nullable=True))
        batch_op.create_unique_constraint(batch_op.f('uq_clusters_uid'), ['uid'])


def downgrade() -> None:
    with op.batch_alter_table('clusters', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('uq_clusters_uid'), type_='unique')
        batch_op.drop_column('uid')
