"""The SQL inventory: member clusters and their topology, tenants and queues, jobs and placements.

One schema for SQLite and PostgreSQL. Resource amounts are JSON maps of integer milli-units
(`{"cpu": 64000, "nvidia.com/gpu": 8000}`) so that arithmetic on them is exact.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (BigInteger, Boolean, CheckConstraint, Float, ForeignKey,
                        Index, Integer, LargeBinary, String, Text, UniqueConstraint, Update,
                        event, false, text, update)
from sqlalchemy.orm import Mapped, declared_attr, mapped_column, relationship

from clusters.rules.pod_security import LEVELS

CLUSTER_STATES = ("Pending", "Ready", "NotReady", "Cordoned", "Draining")
# push: the broker calls the member's API server; pull: an agent inside the member calls the broker.
CLUSTER_MODES = ("push", "pull")
JOB_STATES = ("Queued", "Admitted", "Dispatching", "Starting", "Running", "Succeeded", "Failed", "Cancelled")
JOB_FINISHED_STATES = ("Succeeded", "Failed", "Cancelled")
# A job waiting for a placement: Queued and not being cancelled (the scheduler's `ix_jobs_pending`).
PENDING_SQL = "state = 'Queued' AND cancel_requested_at IS NULL"
# Starting: on the member, its pods not all ready yet; Running: every pod ready (or done).
PLACEMENT_STATES = ("Decided", "Applying", "Starting", "Running", "Succeeded", "Failed", "Deleting", "Deleted")
PLACEMENT_LIVE_STATES = ("Decided", "Applying", "Starting", "Running", "Deleting")
PLACEMENT_ACTIVE_STATES = tuple(s for s in PLACEMENT_LIVE_STATES if s != "Deleting")  # live and meant to stay
PLACEMENT_UNSTARTED_STATES = ("Decided", "Applying", "Starting")  # what a drain moves elsewhere
PREEMPTION_POLICIES = ("Never", "LowerPriority")  # within the queue
RECLAIM_POLICIES = ("Never", "LowerPriority", "Any")  # from the queues of its cohort that borrow
FAIR_SHARE_PREEMPTION_POLICIES = ("Never", "LessThanOrEqualToFinalShare")  # a tenant's, across tenants
POD_SECURITY_LEVELS = LEVELS
TOKEN_ROLES = ("admin", "tenant")
EVENT_KINDS = ("cluster", "job", "queue", "tenant", "placement")
EVENT_TYPES = ("Normal", "Warning")
LEADER = "leader"  # the lease under which the loop services run

# the shared column types, imported from here by the rest of the broker as before
from broker.store.db.columns import (Base, BigId, Json, JsonText, ReasonsByCluster, SharedJson, UtcDateTime,  # noqa: F401
                                     _in, as_utc, by_reason, json_text, utcnow)


class Cluster(Base):
    __tablename__ = "clusters"
    __table_args__ = (CheckConstraint(_in("state", CLUSTER_STATES), name="state"),
                      CheckConstraint(_in("mode", CLUSTER_MODES), name="mode"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    api_server: Mapped[str] = mapped_column(String(2048))
    # The member's own identity, the uid of its kube-system namespace (as Karmada's cluster ID): one cluster
    # registered under two URLs or two names is refused by it, whatever the spellings.
    uid: Mapped[str | None] = mapped_column(String(64), unique=True)
    kubeconfig_encrypted: Mapped[bytes] = mapped_column(LargeBinary)  # empty for a pull member
    mode: Mapped[str] = mapped_column(String(8), default="push", server_default="push")
    # A pull member's agent token, hashed as tenants' tokens are (the secret is shown once, at registration).
    agent_token_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    context: Mapped[str | None] = mapped_column(String(253))
    labels: Mapped[dict[str, str]] = mapped_column(Json, default=dict)
    taints: Mapped[list[dict[str, Any]]] = mapped_column(Json, default=list)
    state: Mapped[str] = mapped_column(String(16), default="Pending")
    # The admin's intent (Cordoned or Draining) that `state` returns to when a NotReady member heals.
    cordon: Mapped[str | None] = mapped_column(String(16))
    kubernetes_version: Mapped[str | None] = mapped_column(String(64))
    jobset_crd: Mapped[bool] = mapped_column(Boolean, default=False)
    hypernode_source: Mapped[str | None] = mapped_column(String(64))  # crd, labels:<recipe>, labels (global), none
    # how a tree is found from node labels when the member has no HyperNode objects (clusters.recipes): a recipe's
    # name, or auto
    topology_recipe: Mapped[str] = mapped_column(String(40), default="auto", server_default="auto")
    # the discovered tree written to the member as HyperNode objects, for its own Volcano (clusters.topology_writeback)
    topology_write_back: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    last_heartbeat: Mapped[datetime | None] = mapped_column(UtcDateTime())
    unreachable_since: Mapped[datetime | None] = mapped_column(UtcDateTime())
    last_error: Mapped[str | None] = mapped_column(Text)
    warnings: Mapped[list[str]] = mapped_column(Json, default=list)
    synced_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    # Grows with every write to its nodes or HyperNodes, in the same transaction (`inventory_changed`): the scheduler
    # reads again the nodes of only the clusters whose revision moved (`broker.store.scheduling.KeptClusters`).
    inventory_revision: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    nodes: Mapped[list[Node]] = relationship(back_populates="cluster", cascade="all, delete-orphan",
                                             passive_deletes=True)
    hypernodes: Mapped[list[HyperNode]] = relationship(back_populates="cluster", cascade="all, delete-orphan",
                                                       passive_deletes=True)


class Node(Base):
    __tablename__ = "nodes"
    __table_args__ = (UniqueConstraint("cluster_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(253))
    labels: Mapped[dict[str, str]] = mapped_column(Json, default=dict)
    taints: Mapped[list[dict[str, Any]]] = mapped_column(Json, default=list)
    unschedulable: Mapped[bool] = mapped_column(Boolean, default=False)
    ready: Mapped[bool] = mapped_column(Boolean, default=True)
    allocatable: Mapped[dict[str, int]] = mapped_column(Json, default=dict)
    used: Mapped[dict[str, int]] = mapped_column(Json, default=dict)  # by every pod on the node
    # the part of `used` held by the pods of each of the broker's placements: placement id -> resources
    placement_used: Mapped[dict[str, dict[str, int]]] = mapped_column(Json, default=dict)
    # what its DRA devices hold of each pod device demand and device-class quota resource, kept apart from the
    # node's own resources (`clusters.device_use`): {"allocatable": {}, "used": {}, "placement_used": {}}
    device_use: Mapped[dict[str, Any]] = mapped_column(Json, default=dict, server_default="{}")

    cluster: Mapped[Cluster] = relationship(back_populates="nodes")


class HyperNode(Base):
    """One switch domain; `nodes` is every node beneath it, resolved at sync, so free capacity is one sum."""

    __tablename__ = "hypernodes"
    __table_args__ = (UniqueConstraint("cluster_id", "name"), CheckConstraint("tier >= 1", name="tier"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(253))
    tier: Mapped[int] = mapped_column(Integer)
    parent: Mapped[str | None] = mapped_column(String(253))
    nodes: Mapped[list[str]] = mapped_column(Json, default=list)

    cluster: Mapped[Cluster] = relationship(back_populates="hypernodes")


def inventory_changed(cluster_id: int) -> Update:
    """The statement that tells the scheduler a cluster's nodes or HyperNodes changed: run it in the transaction that
    changes them. `write_inventory` does for its bulk writes; the listener below for every write through the ORM."""
    clusters = Cluster.__table__
    return update(clusters).where(clusters.c.id == cluster_id).values(
        inventory_revision=clusters.c.inventory_revision + 1)


@event.listens_for(Node, "after_insert")
@event.listens_for(Node, "after_update")
@event.listens_for(Node, "after_delete")
@event.listens_for(HyperNode, "after_insert")
@event.listens_for(HyperNode, "after_update")
@event.listens_for(HyperNode, "after_delete")
def _inventory_written(_mapper, connection, target: Node | HyperNode) -> None:
    connection.execute(inventory_changed(target.cluster_id))


class Tenant(Base):
    """A tenant: it owns namespaces and queues, and shares the federation with the others by `weight`."""

    __tablename__ = "tenants"
    __table_args__ = (
        CheckConstraint("weight > 0", name="weight"),
        CheckConstraint(_in("fair_share_preemption", FAIR_SHARE_PREEMPTION_POLICIES), name="fair_share_preemption"),
        CheckConstraint(_in("pod_security", POD_SECURITY_LEVELS), name="pod_security"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    namespaces: Mapped[list[str]] = mapped_column(Json, default=list)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    fair_share_preemption: Mapped[str] = mapped_column(String(32), default="Never")
    # The Pod Security Standard its pods are held to, at submission and on the members (clusters.rules.pod_security).
    pod_security: Mapped[str] = mapped_column(String(16), default="baseline")
    # Namespaces of its own that the broker may use on a member although it did not create them there.
    adoptable_namespaces: Mapped[list[str]] = mapped_column(Json, default=list)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)

    queues: Mapped[list[Queue]] = relationship(back_populates="tenant")


class Queue(Base):
    """A tenant's queue; the tenant's queues form its cohort, within which unused quota is borrowed."""

    __tablename__ = "queues"
    __table_args__ = (
        CheckConstraint("weight > 0", name="weight"),
        CheckConstraint(_in("preemption_policy", PREEMPTION_POLICIES), name="preemption_policy"),
        CheckConstraint(_in("reclaim_within_cohort", RECLAIM_POLICIES), name="reclaim_within_cohort"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="RESTRICT"))
    name: Mapped[str] = mapped_column(String(63), unique=True)  # JobSets name it by label alone
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    nominal_quota: Mapped[dict[str, int]] = mapped_column(Json, default=dict)
    borrowing_limit: Mapped[dict[str, int] | None] = mapped_column(Json)
    preemption_policy: Mapped[str] = mapped_column(String(16), default="Never")
    reclaim_within_cohort: Mapped[str] = mapped_column(String(16), default="Never")
    is_default: Mapped[bool] = mapped_column(Boolean, default=False)
    default_runtime: Mapped[float | None] = mapped_column(Float)  # seconds: a job's runtime when nothing else says
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)

    tenant: Mapped[Tenant] = relationship(back_populates="queues")


class Token(Base):
    """An API bearer token; only its SHA-256 is kept."""

    __tablename__ = "tokens"
    __table_args__ = (CheckConstraint(_in("role", TOKEN_ROLES), name="role"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(8))
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    description: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class Job(Base):
    """A submitted JobSet and its federated life."""

    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(_in("state", JOB_STATES), name="state"),
        CheckConstraint("restart_count >= 0", name="restart_count"),
        # The scheduler's read: pending jobs by queue, then priority and age.
        Index(None, "state", "queue_id", "priority", "submitted_at"),
        # Listings, newest first: each filter walks an index already in id order (keyset pages, no sort).
        Index(None, "tenant_id", "id"),
        Index(None, "tenant_id", "state", "id"),
        Index(None, "state", "id"),
        Index(None, "queue_id", "id"),
        Index(None, "finished_at"),  # retention: the oldest finished jobs first
        # The scheduler's every cycle: which jobs are pending, from this index alone (no row of 100,000 read; SQLite's
        # planner takes it once the id is bounded: `broker.store.scheduling._EVERY_PENDING`).
        Index("ix_jobs_pending", "state", "id", sqlite_where=text(PENDING_SQL), postgresql_where=text(PENDING_SQL)),
        # One live job per namespace/name: two would collide on a member.
        Index("uq_jobs_live_name", "namespace", "name", unique=True,
              sqlite_where=text(f"NOT {_in('state', JOB_FINISHED_STATES)}"),
              postgresql_where=text(f"NOT {_in('state', JOB_FINISHED_STATES)}")),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="RESTRICT"))
    queue_id: Mapped[int] = mapped_column(ForeignKey("queues.id", ondelete="RESTRICT"))
    name: Mapped[str] = mapped_column(String(63))
    namespace: Mapped[str] = mapped_column(String(63))
    manifest: Mapped[dict[str, Any]] = mapped_column(Json)
    # the ResourceClaimTemplates its pods name, sent with it: they go to its member before it
    claim_templates: Mapped[list[dict[str, Any]]] = mapped_column(Json, default=list, server_default="[]")
    # what the scheduler reads of the manifest (`broker.engine.jobset.placement_record`), written at submission; None for
    # jobs submitted before it was (their manifest is parsed)
    placement_spec: Mapped[str | None] = mapped_column(Text)
    priority_class: Mapped[str] = mapped_column(String(63), default="normal")
    priority: Mapped[int] = mapped_column(Integer, default=0)
    placement_mode: Mapped[str] = mapped_column(String(8), default="whole")
    demand: Mapped[dict[str, int]] = mapped_column(Json, default=dict)
    state: Mapped[str] = mapped_column(String(16), default="Queued")
    reason: Mapped[str | None] = mapped_column(Text)
    waiting_reasons: Mapped[dict[str, str]] = mapped_column(ReasonsByCluster, default=dict)
    status: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    restart_count: Mapped[int] = mapped_column(Integer, default=0)
    # startup evictions (pods not ready within the startup timeout): how many, when it may be placed
    # again (exponential back-off), and the clusters it avoids until when (name -> ISO time)
    evictions: Mapped[int] = mapped_column(Integer, default=0)
    requeue_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    avoid: Mapped[dict[str, str]] = mapped_column(Json, default=dict)
    # the members whose admission refused its copy, with their words (cluster name -> message): never placed there
    # again, and once every member it could go to refused it, it fails
    refused: Mapped[dict[str, str]] = mapped_column(Json, default=dict, server_default="{}")
    # when will it start (broker.store.forecast): what the tenant declared of its runtime (seconds), the bound its
    # Jobs' activeDeadlineSeconds set, and the forecast loop's last word on a waiting job
    declared_runtime: Mapped[float | None] = mapped_column(Float)
    runtime_bound: Mapped[float | None] = mapped_column(Float)
    forecast: Mapped[dict[str, Any] | None] = mapped_column(Json)
    cancel_requested_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    submitted_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    admitted_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())

    tenant: Mapped[Tenant] = relationship()
    queue: Mapped[Queue] = relationship()
    placements: Mapped[list[Placement]] = relationship(back_populates="job", order_by="Placement.id",
                                                       passive_deletes=True)


class Placement(Base):
    """One part of a job (the whole JobSet, or one ReplicatedJob in split mode) on one cluster.

    It is also the dispatch outbox: each state step is committed before the member is touched.
    """

    __tablename__ = "placements"
    __table_args__ = (
        CheckConstraint(_in("state", PLACEMENT_STATES), name="state"),
        UniqueConstraint("job_id", "part", "generation"),
        Index(None, "cluster_id", "state"),
        Index(None, "state", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    part: Mapped[str] = mapped_column(String(63), default="")  # "" is the whole JobSet
    cluster_id: Mapped[int | None] = mapped_column(ForeignKey("clusters.id", ondelete="SET NULL"))
    cluster_name: Mapped[str] = mapped_column(String(63))
    hypernode: Mapped[str | None] = mapped_column(String(253))
    tier: Mapped[int | None] = mapped_column(Integer)
    # [{"node", "replicatedJob", "pods"}] as the engine bound them, and their resources per node:
    # the next cycle's snapshot rebuilds this placement's hold on each node from these.
    assignments: Mapped[list[dict[str, Any]]] = mapped_column(Json, default=list)
    node_usage: Mapped[dict[str, dict[str, int]]] = mapped_column(Json, default=dict)
    exclusive_topology: Mapped[str | None] = mapped_column(String(317))
    resources: Mapped[dict[str, int]] = mapped_column(Json, default=dict)
    generation: Mapped[int] = mapped_column(Integer, default=1)
    state: Mapped[str] = mapped_column(String(16), default="Decided")
    status: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    member_uid: Mapped[str | None] = mapped_column(String(64))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    applied_at: Mapped[datetime | None] = mapped_column(UtcDateTime())  # the startup timeout runs from here
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # the cluster override rules its copy was rendered with, in the order they applied
    overrides: Mapped[list[str]] = mapped_column(Json, default=list, server_default="[]")

    job: Mapped[Job] = relationship(back_populates="placements")


class ClusterOverride(Base):
    """An admin's rule that rewrites JobSets on their way to the clusters it targets (broker.engine.overrides)."""

    __tablename__ = "cluster_overrides"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    apply_order: Mapped[int] = mapped_column(Integer, default=0)  # rules apply lowest first, then by name
    cluster: Mapped[str | None] = mapped_column(String(63))  # one cluster by name, or
    selector: Mapped[str | None] = mapped_column(Text)  # a label selector over cluster labels
    changes: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)  # broker.engine.overrides.FIELDS
    description: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class _OfCluster:
    """A row of one member's devices, named uniquely within it (`clusters.rules.devices`): written by its sync as nodes are,
    only where it differs."""

    @declared_attr.directive
    def __table_args__(cls) -> tuple:  # a constraint of each table's own
        return (UniqueConstraint("cluster_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"), index=True)


class Device(_OfCluster, Base):
    """One device a member's DRA driver publishes: `name` is driver/pool/device, its identity on the member."""

    __tablename__ = "devices"

    name: Mapped[str] = mapped_column(String(1024))
    driver: Mapped[str] = mapped_column(String(253))
    pool: Mapped[str] = mapped_column(String(512))
    device: Mapped[str] = mapped_column(String(128))
    generation: Mapped[int] = mapped_column(BigInteger)
    node: Mapped[str | None] = mapped_column(String(253))  # None: not local to one node
    attributes: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    capacity: Mapped[dict[str, str]] = mapped_column(Json, default=dict)
    consumes: Mapped[list[dict[str, Any]]] = mapped_column(Json, default=list)  # from shared counter sets
    taints: Mapped[list[dict[str, str]]] = mapped_column(Json, default=list)
    allocated_by: Mapped[list[str]] = mapped_column(Json, default=list)  # the ResourceClaims holding it, ns/name
    held_for: Mapped[list[str]] = mapped_column(Json, default=list, server_default="[]")  # placements whose claims


class DeviceClass(_OfCluster, Base):
    __tablename__ = "device_classes"

    name: Mapped[str] = mapped_column(String(253))
    selectors: Mapped[list[str]] = mapped_column(Json, default=list)  # CEL expressions over a device


class CounterSet(_OfCluster, Base):
    """Counters that partitionable devices of a pool share (a GPU's memory and compute slices, as MIG has them)."""

    __tablename__ = "counter_sets"

    name: Mapped[str] = mapped_column(String(1024))  # driver/pool/set
    driver: Mapped[str] = mapped_column(String(253))
    pool: Mapped[str] = mapped_column(String(512))
    counters: Mapped[dict[str, str]] = mapped_column(Json, default=dict)


class DeviceShape(Base):
    """A pod device demand some job made (`clusters.rules.dra.DeviceDemand`): the inventory counts, per node, how many
    pods of each the node's devices hold (the resource `key` names)."""

    __tablename__ = "device_shapes"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    demand: Mapped[dict[str, Any]] = mapped_column(Json)
    description: Mapped[str] = mapped_column(Text)
    counted: Mapped[bool] = mapped_column(Boolean, default=False)  # every member's nodes counted for it since it came


class DeviceClassMapping(Base):
    """An admin's mapping of device classes to a quota resource name (Kueue's deviceClassMappings): devices of these
    classes count as `resource` in quotas, fair shares and the dashboard."""

    __tablename__ = "device_class_mappings"

    resource: Mapped[str] = mapped_column(String(253), primary_key=True)
    device_classes: Mapped[list[str]] = mapped_column(Json)


class TopologyRecipe(Base):
    """An admin's recipe for a HyperNode tree from node labels (clusters.recipes): per tier, closest first, the
    label keys that name a node's domain there."""

    __tablename__ = "topology_recipes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(40), unique=True)
    tiers: Mapped[list[list[str]]] = mapped_column(Json)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class Event(Base):
    """Append-only log of what happened to a job, cluster, queue or tenant."""

    __tablename__ = "events"
    __table_args__ = (
        CheckConstraint(_in("kind", EVENT_KINDS), name="kind"),
        CheckConstraint(_in("type", EVENT_TYPES), name="type"),
        Index(None, "kind", "object_id", "time"),
        Index(None, "time"),
        Index(None, "tenant_id", "time"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    time: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    kind: Mapped[str] = mapped_column(String(16))
    object_id: Mapped[str] = mapped_column(String(253))
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    type: Mapped[str] = mapped_column(String(8), default="Normal")
    reason: Mapped[str] = mapped_column(String(63))
    message: Mapped[str] = mapped_column(Text)


class AuditRecord(Base):
    """Append-only: one change an admin or a tenant asked for through the API — who, from where, what, and how it
    ended — written in the change's own transaction (a refusal in one of its own): `broker.store.audit`."""

    __tablename__ = "audit_records"
    __table_args__ = (Index(None, "time"), Index(None, "actor", "time"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    time: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    actor: Mapped[str] = mapped_column(String(128))  # admin, token 12 (admin), token 15 (tenant research), anonymous
    tenant: Mapped[str | None] = mapped_column(String(63))  # the tenant a tenant's token speaks for
    source: Mapped[str] = mapped_column(String(64))  # the client's address
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(String(2048))
    route: Mapped[str | None] = mapped_column(String(256))  # the route's template, e.g. /api/v1/queues/{name}
    status: Mapped[int] = mapped_column(Integer)  # the answer's status (200 when committed before it was sent)
    outcome: Mapped[str] = mapped_column(String(16))  # succeeded, refused, failed


class Lease(Base):
    """What one replica at a time may do (the loop services: `leader`): its holder until `expires_at`, and a
    fencing token that grows with every new holder, which each of the holder's commits checks."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(253))
    token: Mapped[int] = mapped_column(BigInteger, default=0)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime())
