"""leader lease: the loop services run in the replica that holds it; its fencing token guards their commits

Revision ID: 0006_leader_lease
Revises: 0005
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0006_leader_lease'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('leases',
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('holder', sa.String(length=253), nullable=True),
    sa.Column('token', sa.BigInteger(), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_leases'))
    )


def downgrade() -> None:
    op.drop_table('leases')
