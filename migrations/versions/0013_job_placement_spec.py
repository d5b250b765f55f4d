"""jobs: the placement spec, written at submission, so that the scheduler reads it rather than parse the manifest

Revision ID: 0013_job_placement_spec
Revises: 0012_cluster_inventory_revision
Create Date: 2026-12-04
"""
from alembic import op
import sqlalchemy as sa

revision = '0013_job_placement_spec'
down_revision = '0012_cluster_inventory_revision'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('placement_spec', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.drop_column('placement_spec')
