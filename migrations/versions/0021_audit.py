"""the audit trail: one append-only record per change asked through the API, with who, from where, what and how

Revision ID: 0021_audit
Revises: 0020_device_demands
Create Date: 2026-12-07
"""
from alembic import op
import sqlalchemy as sa

revision = '0021_audit'
down_revision = '0020_device_demands'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('audit_records',
                    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True,
                              nullable=False),
                    sa.Column('time', sa.DateTime(timezone=True), nullable=False),
                    sa.Column('actor', sa.String(length=128), nullable=False),
                    sa.Column('tenant', sa.String(length=63), nullable=True),
                    sa.Column('source', sa.String(length=64), nullable=False),
                    sa.Column('method', sa.String(length=8), nullable=False),
                    sa.Column('path', sa.String(length=2048), nullable=False),
                    sa.Column('route', sa.String(length=256), nullable=True),
                    sa.Column('status', sa.Integer(), nullable=False),
                    sa.Column('outcome', sa.String(length=16), nullable=False),
                    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_records')))
    op.create_index(op.f('ix_audit_records_time'), 'audit_records', ['time'], unique=False)
    op.create_index(op.f('ix_audit_records_actor_time'), 'audit_records', ['actor', 'time'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_audit_records_actor_time'), table_name='audit_records')
    op.drop_index(op.f('ix_audit_records_time'), table_name='audit_records')
    op.drop_table('audit_records')
