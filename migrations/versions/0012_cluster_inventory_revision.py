"""clusters: an inventory revision that grows with every write to a cluster's nodes or HyperNodes, so that the
scheduler reads again only the clusters whose inventory changed

Revision ID: 0012_cluster_inventory_revision
Revises: 0011_pending_jobs_index
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0012_cluster_inventory_revision'
down_revision = '0011_pending_jobs_index'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('clusters', sa.Column('inventory_revision', sa.Integer(), server_default='0', nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('clusters') as batch:
        batch.drop_column('inventory_revision')
