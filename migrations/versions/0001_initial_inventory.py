"""initial inventory

Revision ID: 0001
Revises: 
Create Date: 2026-11-30
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('clusters',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('api_server', sa.String(length=2048), nullable=False),
    sa.Column('kubeconfig_encrypted', sa.LargeBinary(), nullable=False),
    sa.Column('context', sa.String(length=253), nullable=True),
    sa.Column('labels', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('taints', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('cordon', sa.String(length=16), nullable=True),
    sa.Column('kubernetes_version', sa.String(length=64), nullable=True),
    sa.Column('jobset_crd', sa.Boolean(), nullable=False),
    sa.Column('hypernode_source', sa.String(length=16), nullable=True),
    sa.Column('last_heartbeat', sa.DateTime(timezone=True), nullable=True),
    sa.Column('unreachable_since', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('warnings', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('synced_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("state IN ('Pending', 'Ready', 'NotReady', 'Cordoned', 'Draining')", name=op.f('ck_clusters_state')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_clusters')),
    sa.UniqueConstraint('name', name=op.f('uq_clusters_name'))
    )
    op.create_table('tenants',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('namespaces', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_tenants')),
    sa.UniqueConstraint('name', name=op.f('uq_tenants_name'))
    )
    op.create_table('events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('time', sa.DateTime(timezone=True), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('object_id', sa.String(length=253), nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=True),
    sa.Column('type', sa.String(length=8), nullable=False),
    sa.Column('reason', sa.String(length=63), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.CheckConstraint("kind IN ('cluster', 'job', 'queue', 'tenant', 'placement')", name=op.f('ck_events_kind')),
    sa.CheckConstraint("type IN ('Normal', 'Warning')", name=op.f('ck_events_type')),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], name=op.f('fk_events_tenant_id_tenants'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_events'))
    )
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_events_kind_object_id_time'), ['kind', 'object_id', 'time'], unique=False)
        batch_op.create_index(batch_op.f('ix_events_tenant_id_time'), ['tenant_id', 'time'], unique=False)
        batch_op.create_index(batch_op.f('ix_events_time'), ['time'], unique=False)

    op.create_table('hypernodes',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('cluster_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=253), nullable=False),
    sa.Column('tier', sa.Integer(), nullable=False),
    sa.Column('parent', sa.String(length=253), nullable=True),
    sa.Column('nodes', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.CheckConstraint('tier >= 1', name=op.f('ck_hypernodes_tier')),
    sa.ForeignKeyConstraint(['cluster_id'], ['clusters.id'], name=op.f('fk_hypernodes_cluster_id_clusters'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_hypernodes')),
    sa.UniqueConstraint('cluster_id', 'name', name=op.f('uq_hypernodes_cluster_id_name'))
    )
    op.create_table('nodes',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('cluster_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=253), nullable=False),
    sa.Column('labels', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('taints', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('unschedulable', sa.Boolean(), nullable=False),
    sa.Column('ready', sa.Boolean(), nullable=False),
    sa.Column('allocatable', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('used', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.ForeignKeyConstraint(['cluster_id'], ['clusters.id'], name=op.f('fk_nodes_cluster_id_clusters'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_nodes')),
    sa.UniqueConstraint('cluster_id', 'name', name=op.f('uq_nodes_cluster_id_name'))
    )
    op.create_table('queues',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('weight', sa.Float(), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('nominal_quota', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('borrowing_limit', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('preemption_policy', sa.String(length=16), nullable=False),
    sa.Column('is_default', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("preemption_policy IN ('Never', 'LowerPriority')", name=op.f('ck_queues_preemption_policy')),
    sa.CheckConstraint('weight > 0', name=op.f('ck_queues_weight')),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], name=op.f('fk_queues_tenant_id_tenants'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_queues')),
    sa.UniqueConstraint('name', name=op.f('uq_queues_name'))
    )
    op.create_table('tokens',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('role', sa.String(length=8), nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=True),
    sa.Column('description', sa.String(length=255), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("role IN ('admin', 'tenant')", name=op.f('ck_tokens_role')),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], name=op.f('fk_tokens_tenant_id_tenants'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_tokens')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_tokens_token_hash'))
    )
    op.create_table('jobs',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=False),
    sa.Column('queue_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('namespace', sa.String(length=63), nullable=False),
    sa.Column('manifest', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('priority_class', sa.String(length=63), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('placement_mode', sa.String(length=8), nullable=False),
    sa.Column('demand', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('waiting_reasons', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('status', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('restart_count', sa.Integer(), nullable=False),
    sa.Column('cancel_requested_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('submitted_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('admitted_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("state IN ('Queued', 'Admitted', 'Dispatching', 'Running', 'Succeeded', 'Failed', 'Cancelled')", name=op.f('ck_jobs_state')),
    sa.CheckConstraint('restart_count >= 0', name=op.f('ck_jobs_restart_count')),
    sa.ForeignKeyConstraint(['queue_id'], ['queues.id'], name=op.f('fk_jobs_queue_id_queues'), ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], name=op.f('fk_jobs_tenant_id_tenants'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs'))
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_jobs_state_queue_id_priority_submitted_at'), ['state', 'queue_id', 'priority', 'submitted_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_tenant_id_state'), ['tenant_id', 'state'], unique=False)
        batch_op.create_index('uq_jobs_live_name', ['namespace', 'name'], unique=True,
                              sqlite_where=sa.text("NOT state IN ('Succeeded', 'Failed', 'Cancelled')"),
                              postgresql_where=sa.text("NOT state IN ('Succeeded', 'Failed', 'Cancelled')"))

    op.create_table('placements',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('job_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('part', sa.String(length=63), nullable=False),
    sa.Column('cluster_id', sa.Integer(), nullable=True),
    sa.Column('cluster_name', sa.String(length=63), nullable=False),
    sa.Column('hypernode', sa.String(length=253), nullable=True),
    sa.Column('tier', sa.Integer(), nullable=True),
    sa.Column('assignments', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('node_usage', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('exclusive_topology', sa.String(length=317), nullable=True),
    sa.Column('resources', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('generation', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('status', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('member_uid', sa.String(length=64), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("state IN ('Decided', 'Applying', 'Applied', 'Running', 'Succeeded', 'Failed', 'Deleting', 'Deleted')", name=op.f('ck_placements_state')),
    sa.ForeignKeyConstraint(['cluster_id'], ['clusters.id'], name=op.f('fk_placements_cluster_id_clusters'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_placements_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_placements')),
    sa.UniqueConstraint('job_id', 'part', 'generation', name=op.f('uq_placements_job_id_part_generation'))
    )
    with op.batch_alter_table('placements', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_placements_cluster_id_state'), ['cluster_id', 'state'], unique=False)
        batch_op.create_index(batch_op.f('ix_placements_state_next_attempt_at'), ['state', 'next_attempt_at'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('placements', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_placements_state_next_attempt_at'))
        batch_op.drop_index(batch_op.f('ix_placements_cluster_id_state'))

    op.drop_table('placements')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('uq_jobs_live_name', sqlite_where=sa.text("NOT state IN ('Succeeded', 'Failed', 'Cancelled')"),
                            postgresql_where=sa.text("NOT state IN ('Succeeded', 'Failed', 'Cancelled')"))
        batch_op.drop_index(batch_op.f('ix_jobs_tenant_id_state'))
        batch_op.drop_index(batch_op.f('ix_jobs_state_queue_id_priority_submitted_at'))

    op.drop_table('jobs')
    op.drop_table('tokens')
    op.drop_table('queues')
    op.drop_table('nodes')
    op.drop_table('hypernodes')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_events_time'))
        batch_op.drop_index(batch_op.f('ix_events_tenant_id_time'))
        batch_op.drop_index(batch_op.f('ix_events_kind_object_id_time'))

    op.drop_table('events')
    op.drop_table('tenants')
    op.drop_table('clusters')
