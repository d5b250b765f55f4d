"""The scheduler's I/O around the pure placement engine: read one snapshot, commit one cycle.

A cycle, after Kueue's scheduler:
1. `read_inventory`: clusters, nodes, HyperNodes, queues, live placements and pending jobs in one
   consistent read transaction (`Database.read`: REPEATABLE READ on PostgreSQL, a BEGIN on SQLite); the
   pending rows (`PendingJobs`), the clusters' nodes and the live placements (`KeptClusters`) kept since the
   last cycle are brought up to date, not read again.
2. `broker.placement.schedule`: decisions over that snapshot, no I/O.
3. `commit_cycle`: the decisions a slice of jobs per transaction, in the order the cycle made them
   (`commit_decisions`, in a `Database.write`: a new leader's first cycle admits thousands, and one
   transaction held the write lock from every submission meanwhile); then the waiting jobs' reasons that
   changed (`write_reasons`), a slice per transaction.

Two guards make a cycle safe to crash or to race. Each slice's commit holds the scheduler's write lock
and checks a fence (the newest placement id it read, then the one the slice before left): if another
scheduler committed placements since, that slice and the rest are dropped, since the snapshot no longer
holds. And each job is admitted by a conditional UPDATE (still Queued, not cancelled): a job that was
placed or cancelled meanwhile gets none of its placements inserted. A job's placements, its admission,
the placements it preempts and its events are in one slice: a crash leaves the job either admitted
with all of them or Queued with none, and the next cycle places it once.
"""

from __future__ import annotations

import json
import sys
from bisect import bisect_left, insort
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from operator import itemgetter
from types import MappingProxyType
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from sqlalchemy import String, bindparam, cast, func, insert, literal_column, select, update
from sqlalchemy.orm import Session

from broker.db.models import (JOB_FINISHED_STATES, PLACEMENT_ACTIVE_STATES, PLACEMENT_LIVE_STATES,
                              Cluster as ClusterRow, Event, HyperNode as HyperNodeRow, Job, JsonText, Node as NodeRow,
                              Placement as PlacementRow, Queue as QueueRow, SharedJson, Tenant as TenantRow, as_utc,
                              by_reason, json_text)
from broker.db.runtime import Database, WriteSlices, write_in_slices
from broker.db.session import in_chunks
from broker.dispatch import lock_job_rows
from broker.jobset import (ON_PREEMPTION_ANNOTATION, JobSetError, PartSpec, PlacementSpec, from_placement_record,
                           parse_jobset)
from broker.placement import (DEFAULT_FILTERS, DEFAULT_SCORE_WEIGHTS, Cluster, Config, CycleResult, DryRun, HyperNode,
                              Node, Parked, PendingJob, Placement, Preemption, Queue, RunningPlacement, Snapshot,
                              Tenant, Waiting, dry_run, shape_of)
from broker.placement.cycle import JOBS_BETWEEN_PAUSES
from broker.placement.model import QUEUE_ORDER, Backlog, no_pause
from broker.placement.snapshot import ClusterIndex
from broker.settings import ConfigError, Settings
from clusters.quantity import add_into

# PostgreSQL advisory lock key held by a scheduler while it commits ("arch" in ASCII).
SCHEDULER_LOCK_KEY = 0x61726368
# Placements that may still be preempted; a Deleting one is already on its way out.
# A part whose newest placement is in one of these needs no new one.
HELD_STATES = (*PLACEMENT_ACTIVE_STATES, "Succeeded")


def engine_config(settings: Settings) -> Config:
    """The engine's plugin weights and switches from the settings; an unknown plugin name stops the start."""
    unknown = sorted(set(settings.placement_disabled_filters) - set(DEFAULT_FILTERS))
    if unknown:
        raise ConfigError(f"ARCHIPELAGO_PLACEMENT_DISABLED_FILTERS: unknown filters {unknown}; "
                          f"known: {list(DEFAULT_FILTERS)}")
    try:
        return Config(filters=tuple(f for f in DEFAULT_FILTERS if f not in settings.placement_disabled_filters),
                      score_weights=MappingProxyType({**DEFAULT_SCORE_WEIGHTS, **settings.placement_score_weights}),
                      starvation_after_s=settings.placement_starvation_after, max_holds=settings.placement_max_holds,
                      preemption=settings.placement_preemption)
    except ValueError as exc:
        raise ConfigError(f"ARCHIPELAGO_PLACEMENT_SCORE_WEIGHTS: {exc}") from None


@dataclass(frozen=True, slots=True)
class PendingRecord:
    """What the commit needs to know of a pending job beyond the engine's view of it: its stored reasons, the
    per-cluster ones as a digest (kept for every pending job, they would weigh kilobytes each)."""

    tenant_id: int
    reason: str | None
    reasons_digest: int


def reasons_digest(reasons: Mapping[str, str], memo: dict[int, int] | None = None) -> int:
    """Equal per-cluster reasons, equal digests: whether a job's reasons changed, without keeping them; the digest of
    what is stored is `stored_reasons_digest`. With `memo`, once per mapping while they all live: a cycle's waiting
    jobs of one shape share theirs (a new leader's first cycle has 100,000 of them)."""
    if memo is None:
        return _grouped_digest(by_reason(reasons))
    digest = memo.get(id(reasons))
    if digest is None:
        digest = memo[id(reasons)] = _grouped_digest(by_reason(reasons))
    return digest


def stored_reasons_digest(stored: Mapping[str, Any] | None) -> int:
    """`reasons_digest` of reasons as `jobs.waiting_reasons` stores them, {reason: [clusters]} (a row written before
    that: {cluster: reason}), read without making them {cluster: reason} again: a full read of 100,000 waiting jobs
    spent a second doing that."""
    if stored and isinstance(next(iter(stored.values())), str):
        stored = by_reason(stored)
    return _grouped_digest(stored or {})


def _grouped_digest(grouped: Mapping[str, Iterable[str]]) -> int:
    return hash(frozenset((reason, frozenset(clusters)) for reason, clusters in grouped.items()))


@dataclass(slots=True)
class Inventory:
    """One cycle's read: the engine's snapshot and pending jobs, and the ids the commit writes with."""

    snapshot: Snapshot
    pending: Backlog
    records: Mapping[str, PendingRecord]  # pending job id -> its tenant id and stored reasons
    unplaceable: dict[str, Waiting]  # pending jobs whose manifest no longer parses
    cluster_ids: dict[str, int]
    generations: dict[tuple[str, str], int]  # (job id, part) -> highest generation placed so far
    tenant_ids: dict[str, int]  # running job id -> tenant id
    fence: int  # newest placement id at the read
    # what could make an inadmissible job fit: clusters, queues, tenants by name, live placements by id
    inputs: tuple[dict, dict, dict, dict[int, RunningPlacement]] = ({}, {}, {}, {})


@dataclass(slots=True)
class CommitOutcome:
    admitted: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)  # placed or cancelled by someone else meanwhile
    placements: int = 0
    preempted: int = 0  # placements marked Deleting
    changed: list[Waiting] = field(default_factory=list)  # the waiting jobs whose reasons were written
    stale: bool = False  # another scheduler committed since the read: the rest was not written
    fence: int = 0  # newest placement id once committed

    @property
    def reasons_written(self) -> int:
        return len(self.changed)

    def add(self, slice_: CommitOutcome) -> None:
        """What the next slice of the same cycle committed."""
        self.admitted = sorted((*self.admitted, *slice_.admitted))
        self.dropped = sorted((*self.dropped, *slice_.dropped))
        self.placements += slice_.placements
        self.preempted += slice_.preempted
        self.fence = slice_.fence


# -- 1. the read -------------------------------------------------------------------------------------
# as `ix_jobs_pending` says it, the state a literal: a partial index serves only a query that names its condition
_PENDING = (Job.state == literal_column("'Queued'"), Job.cancel_requested_at.is_(None))

# every pending id from `ix_jobs_pending` alone: with no bound on the id, SQLite's planner takes ix_jobs_state_id and
# reads each row's cancel_requested_at from the table (three times slower at 100,000 pending)
_EVERY_PENDING = (*_PENDING, Job.id > 0)


def has_pending(session: Session) -> bool:
    """Is any job waiting for a placement? An idle scheduler skips the snapshot."""
    return session.scalar(select(Job.id).where(*_PENDING).limit(1)) is not None


def read_inventory(session: Session, *, now: float, pending: PendingJobs | None = None,
                   kept: KeptClusters | None = None, with_pending: bool = True,
                   pause: Callable[[], None] = no_pause) -> Inventory:
    """The snapshot of one cycle, read in one transaction: call on a fresh `Database.read()` session.

    What is in use on a node (DESIGN, Placement): the pods the broker did not create, plus for each
    live placement the larger of what it reserved there and what its pods (labelled with its id)
    request — a placement whose pods have not appeared yet still holds its nodes. A placement being
    deleted holds its nodes until its member confirms, but no longer counts toward its queue.
    `pending` keeps the pending jobs' rows and parsed manifests across cycles (`PendingJobs`), `kept` the
    clusters and live placements (`KeptClusters`); without them every row is read. `pause`: the snapshot's (`Snapshot`).
    """
    fence = session.scalar(select(func.max(PlacementRow.id))) or 0
    clusters, cluster_ids, running, tenant_ids = (kept or KeptClusters()).read(session, now, pause)
    tenants = [Tenant(*row) for row in session.execute(
        select(TenantRow.name, TenantRow.weight, TenantRow.fair_share_preemption))]
    queues = [Queue(name=q.name, tenant=tenant, weight=q.weight, priority=q.priority,
                    nominal_quota=q.nominal_quota or {}, borrowing_limit=q.borrowing_limit,
                    preemption=q.preemption_policy, reclaim_within_cohort=q.reclaim_within_cohort)
              for q, tenant in session.execute(select(QueueRow, TenantRow.name).join(TenantRow))]
    snapshot = Snapshot(clusters, queues, tenants, running.values(), now, kept and kept.indexes, pause)
    inventory = Inventory(snapshot, Backlog({}), {}, {}, cluster_ids, {}, tenant_ids, fence,
                          ({c.name: c for c in clusters}, {q.name: q for q in queues}, {t.name: t for t in tenants},
                           running))
    if with_pending:
        _read_pending(session, inventory, PendingJobs() if pending is None else pending)
    return inventory


def read_clusters(session: Session, kept: KeptClusters | None = None,
                  pause: Callable[[], None] = no_pause) -> list[Cluster]:
    """Every cluster with its nodes and HyperNodes as the engine reads them (for the submission check), each the same
    object as `kept` last built while its inventory holds. `pause`: `KeptClusters.refresh`'s."""
    kept = kept or KeptClusters()
    kept.refresh(session, pause)
    clusters = []
    for entry in kept.clusters.values():
        pause()
        clusters.append(entry.build(frozenset()))
    return clusters


NODES_BETWEEN_PAUSES = 128  # ~1 ms of a read of the clusters' nodes

_CLUSTER_COLUMNS = (ClusterRow.id, ClusterRow.name, ClusterRow.state, ClusterRow.labels, ClusterRow.taints,
                    ClusterRow.jobset_crd, ClusterRow.created_at, ClusterRow.inventory_revision)
# What a live placement's row says that changes after its insert; the rest of it is read once.
_PLACEMENT_CHANGES = (PlacementRow.id, PlacementRow.state, PlacementRow.started_at)


def _inventory_of(row: Any) -> tuple[datetime, int]:
    return row.created_at, row.inventory_revision


@dataclass(frozen=True, slots=True)
class _NodeRow:
    node: Node  # `used` as every pod on it uses it
    placement_used: Mapping[str, Mapping[str, int]]  # placement id -> what its pods use here


class _KeptCluster:
    """One cluster's row and nodes as last read, and the `Cluster` last built from them (kept while they hold)."""

    def __init__(self, row: Any, nodes: list[_NodeRow], hypernodes: tuple[HyperNode, ...]) -> None:
        self.row, self.nodes, self.hypernodes = row, nodes, hypernodes
        self.mentioned = frozenset(p for n in nodes for p in n.placement_used)  # placements whose pods are here
        self.live: frozenset[str] | None = None  # those of them live when `cluster` was built
        self.cluster: Cluster | None = None
        self.pods_of: dict[str, dict[str, Mapping[str, int]]] = {}  # live placement id -> node -> its pods' use

    def build(self, live: frozenset[str]) -> Cluster:
        """The cluster as the engine sees it while the placements `live` are: a node's `used` is what the pods
        of no live placement hold there. The last one built, while nothing it depends on changed."""
        live = live & self.mentioned
        if live != self.live:
            self.live, self.pods_of, nodes = live, {}, []
            for row in self.nodes:
                node = row.node
                if live.intersection(row.placement_used):
                    others = dict(node.used)
                    for placement_id in live.intersection(row.placement_used):
                        add_into(others, row.placement_used[placement_id], -1)
                        self.pods_of.setdefault(placement_id, {})[node.name] = row.placement_used[placement_id]
                    node = replace(node, used=others)
                nodes.append(node)
            self.cluster = None
        else:
            nodes = self.cluster.nodes
        row = self.row
        cluster = Cluster(row.name, row.state, row.labels, tuple(row.taints), row.jobset_crd, tuple(nodes),
                          self.hypernodes)
        if cluster != self.cluster:  # equal: the same object as last cycle, which the engine compares by identity
            self.cluster = cluster
        return self.cluster


class KeptClusters:
    """The cluster half of the scheduler's snapshot, kept between cycles as `PendingJobs` keeps the pending half: a
    cycle reads the cluster rows and the state of each live placement, and the nodes and HyperNodes of only the
    clusters whose inventory changed, the rest of a placement's row only when it is new.

    Why nothing is missed: a cluster's nodes and HyperNodes are written only with its `inventory_revision` growing in
    the same transaction (`broker.db.models.inventory_changed`; a cluster is known by its id and registration time),
    and a placement's row changes after its insert only in its state and start, read every cycle. What a node has
    free depends on which placements are live: a cluster is built again when one whose pods are on it starts or
    stops being live. Every `resync_interval` seconds and after any doubt (`forget`) everything is read again."""

    def __init__(self, resync_interval: float = 0.0) -> None:
        self.resync_interval = resync_interval
        self.clusters: dict[int, _KeptCluster] = {}
        # live placement id -> its row as first read, its state and start as last read, and as the engine sees it
        self.placements: dict[int, tuple[Any, Any, RunningPlacement]] = {}
        self.indexes: dict[str, ClusterIndex] = {}  # the clusters' indexes as the last snapshot built them
        self.full_read_at = float("-inf")

    def forget(self) -> None:
        self.clusters, self.placements, self.indexes = {}, {}, {}

    def refresh(self, session: Session, pause: Callable[[], None] = no_pause) -> None:
        """Read the cluster rows, and the nodes and HyperNodes of those whose inventory changed. `pause`: called every
        NODES_BETWEEN_PAUSES nodes (for a process whose requests go first, `broker.courtesy`): once every member's
        pods changed, all 8,000 nodes of bench/leader_api.py are read again in one stretch of 0.3 s or more."""
        rows = {row.id: row for row in session.execute(select(*_CLUSTER_COLUMNS).order_by(ClusterRow.id))}
        # by registration too: SQLite gives a removed cluster's id to the next one, which may have its revision
        changed = [cluster_id for cluster_id, row in rows.items() if cluster_id not in self.clusters
                   or _inventory_of(self.clusters[cluster_id].row) != _inventory_of(row)]
        kept = {cluster_id: entry for cluster_id, entry in self.clusters.items() if cluster_id in rows}
        for cluster_id in rows.keys() & kept.keys():
            kept[cluster_id].row = rows[cluster_id]
        nodes: dict[int, list[_NodeRow]] = {cluster_id: [] for cluster_id in changed}
        hypernodes: dict[int, list[HyperNode]] = {cluster_id: [] for cluster_id in changed}
        texts: SharedJson[Any] = SharedJson()
        read = 0
        for chunk in in_chunks(changed):
            for row in session.execute(select(NodeRow.cluster_id, NodeRow.name, json_text(NodeRow.labels),
                                              json_text(NodeRow.taints), NodeRow.unschedulable, NodeRow.ready,
                                              json_text(NodeRow.allocatable), json_text(NodeRow.used),
                                              json_text(NodeRow.placement_used)).where(NodeRow.cluster_id.in_(chunk))
                                       .order_by(NodeRow.cluster_id, NodeRow.name)):
                if not read % NODES_BETWEEN_PAUSES:
                    pause()
                read += 1
                node = Node(row.name, texts(row.allocatable), texts(row.used), texts(row.labels),
                            tuple(texts(row.taints)), row.unschedulable or not row.ready)
                nodes[row.cluster_id].append(_NodeRow(node, texts(row.placement_used) or {}))
            for row in session.execute(select(HyperNodeRow.cluster_id, HyperNodeRow.name, HyperNodeRow.tier,
                                              HyperNodeRow.parent, json_text(HyperNodeRow.nodes))
                                       .where(HyperNodeRow.cluster_id.in_(chunk))
                                       .order_by(HyperNodeRow.cluster_id, HyperNodeRow.name)):
                hypernodes[row.cluster_id].append(HyperNode(row.name, row.tier, row.parent, (),
                                                            tuple(texts(row.nodes))))
        for cluster_id in changed:
            kept[cluster_id] = _KeptCluster(rows[cluster_id], nodes[cluster_id], tuple(hypernodes[cluster_id]))
        self.clusters = {cluster_id: kept[cluster_id] for cluster_id in rows}

    def read(self, session: Session, now: float, pause: Callable[[], None] = no_pause
             ) -> tuple[list[Cluster], dict[str, int], dict[int, RunningPlacement], dict[str, int]]:
        """This cycle's clusters as the engine sees them, the cluster ids by name, the live placements by id, and the
        tenant id of each job they belong to. `pause`: `refresh`'s, and between clusters built."""
        if now - self.full_read_at >= self.resync_interval:
            self.forget()
            self.full_read_at = now
        self.refresh(session, pause)
        changes = {row.id: row for row in session.execute(
            select(*_PLACEMENT_CHANGES).where(PlacementRow.state.in_(PLACEMENT_LIVE_STATES)))}
        live = frozenset(str(placement_id) for placement_id in changes)
        clusters, by_name = [], {}
        for entry in self.clusters.values():
            pause()
            before = entry.cluster
            clusters.append(entry.build(live))
            by_name[entry.row.name] = (entry, entry.cluster is not before)
        rows = {placement_id: kept[0] for placement_id, kept in self.placements.items() if placement_id in changes}
        for chunk in in_chunks(sorted(changes.keys() - rows.keys())):
            rows.update((row.id, row) for row in session.execute(_LIVE_PLACEMENT.where(PlacementRow.id.in_(chunk))))
        placements, running, tenant_ids = {}, {}, {}
        for placement_id in sorted(rows):
            row, change = rows[placement_id], changes[placement_id]
            entry, rebuilt = by_name.get(row.cluster_name, (None, False))
            kept = self.placements.get(placement_id)
            if kept is None or rebuilt or kept[1] != change:
                kept = (row, change, _running(row, change, entry.pods_of if entry else {}))
            placements[placement_id] = kept
            running[placement_id] = kept[2]
            tenant_ids[str(row.job_id)] = row.tenant_id
        self.placements = placements
        cluster_ids = {entry.row.name: cluster_id for cluster_id, entry in self.clusters.items()}
        return clusters, cluster_ids, running, tenant_ids


_LIVE_PLACEMENT = (select(PlacementRow.id, PlacementRow.job_id, PlacementRow.part, PlacementRow.cluster_name,
                          PlacementRow.hypernode, PlacementRow.node_usage, PlacementRow.assignments,
                          PlacementRow.exclusive_topology, PlacementRow.created_at,
                          Job.priority, Job.tenant_id, QueueRow.name.label("queue"), TenantRow.name.label("tenant"))
                   .join(Job, Job.id == PlacementRow.job_id).join(QueueRow, QueueRow.id == Job.queue_id)
                   .join(TenantRow, TenantRow.id == Job.tenant_id))


def _running(row: Any, change: Any, pods_of: Mapping[str, Mapping[str, Mapping[str, int]]]) -> RunningPlacement:
    pods: dict[str, int] = {}
    for a in row.assignments:
        pods[a["node"]] = pods.get(a["node"], 0) + a["pods"]
    return RunningPlacement(
        job_id=str(row.job_id), part=row.part or None, cluster=row.cluster_name, hypernode=row.hypernode,
        node_usage=_held(row.node_usage, pods_of.get(str(row.id), {})), node_pods=pods, tenant=row.tenant,
        queue=row.queue, priority=row.priority, started_at=as_utc(change.started_at or row.created_at).timestamp(),
        exclusive_topology=row.exclusive_topology, charged=change.state != "Deleting")


def _held(reserved: Mapping[str, Mapping[str, int]], pods: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Per node and resource, the larger of a placement's reservation and what its pods there request."""
    held = {node: dict(amounts) for node, amounts in reserved.items()}
    for node, amounts in pods.items():
        mine = held.setdefault(node, {})
        for resource, amount in amounts.items():
            mine[resource] = max(mine.get(resource, 0), amount)
    return held


@dataclass(frozen=True, slots=True)
class _PendingRow:
    """A pending job's row as kept between cycles: what the engine sees of it, and its stored reasons."""

    job: PendingJob | None  # None: its manifest no longer parses (`unplaceable`)
    unplaceable: Waiting | None
    record: PendingRecord
    requeue_at: datetime | None
    avoid: Mapping[str, str] | None


class PendingJobs:
    """The pending jobs' rows, kept by the scheduler between cycles (after Kueue's in-memory queues), so
    that a cycle reads only whether the pending ids are the kept ones and those above the highest (a digest of
    them, from an index: `_new_ids`), the rows of the new ones, and the earlier placements of those and of the
    jobs placed before.

    Why nothing is missed: a row the scheduler reads changes only by leaving the pending set (admitted,
    cancelled, finished) and coming back to it (requeued with a new reason, back-off and avoided
    clusters); coming back needs an admission first, and only a scheduler admits, inserting placements
    under its commit lock. So while the newest placement id is the one this scheduler's last commit
    left (`fence`), every pending id it knows stands for the row it read; a job that came back since is
    one it admitted itself and forgot (`committed`), and shows in the digest of the pending ids (`_IdDigest`).
    Any doubt — another scheduler placed meanwhile, a cycle dropped or failed (`forget`), `resync_interval`
    seconds passed — makes the next read a full one.
    The stored reasons kept are those this scheduler wrote: only the leader writes them (lease fencing).
    """

    def __init__(self, resync_interval: float = 0.0, pause: Callable[[], None] = no_pause) -> None:
        self.resync_interval = resync_interval
        self.pause = pause  # between rows read (`broker.courtesy`): a manifest parsed holds the interpreter ~0.5 ms
        self.rows: dict[str, _PendingRow] = {}
        self.ids: set[int] = set()  # the rows' job ids, as the pending index gives them
        self.digest = _IdDigest()  # of `ids`
        # the rows' jobs a cycle passes on as they are (`plain`; by queue, each in its order: `queued`), and the
        # others, looked at one by one each cycle: backing off, avoiding clusters, placed before (`single_out`), or no
        # longer parsing
        self.plain: dict[str, PendingJob] = {}
        self.queued: dict[str, list[PendingJob]] = {}
        self.others: set[str] = set()
        self.fence: int | None = None  # None: the next read is a full one
        self.full_read_at = float("-inf")  # snapshot clock of the last full read
        self.full_reads = 0
        self.parked: frozenset[str] = frozenset()  # the last cycle's inadmissible jobs
        self.inputs: tuple | None = None  # `Inventory.inputs` of the cycle that found them inadmissible
        self.held: dict[str, frozenset[str]] = {}  # cluster -> the nodes that cycle held
        self.parts: dict[str, tuple[PartSpec, ...]] = {}  # shape -> the parts its pending jobs share

    def forget(self) -> None:
        """In doubt: read every pending row next time, and decide every job."""
        self.fence, self.parked, self.inputs = None, frozenset(), None

    def reads_all(self, now: float) -> bool:
        """Will the next read (at `now`, snapshot clock) be a full one, as far as this scheduler knows? (Another
        scheduler's commit since makes it one too.)"""
        return self.fence is None or now - self.full_read_at >= self.resync_interval

    def still_parked(self, inventory: Inventory) -> Parked:
        """The last cycle's inadmissible jobs, and what changed since that could make one fit: clusters that changed
        or where a live placement ended or changed (capacity back), the tenants of those placements (quota back),
        and the nodes that cycle held (where they are not held again, capacity is back).
        (New running work is no reason: it takes what was free, and preempting it gives back no more than that.)
        Any queue or tenant edit: every job is decided again."""
        before, now = self.inputs, inventory.inputs
        if before is None or before[1:3] != now[1:3]:
            return Parked()
        clusters = {name for name in before[0].keys() | now[0].keys() if before[0].get(name) != now[0].get(name)}
        tenants = set()
        for placement_id, placement in before[3].items():
            if now[3].get(placement_id) != placement:
                clusters.add(placement.cluster)
                tenants.add(placement.tenant)
        return Parked(self.parked, frozenset(clusters), frozenset(tenants), self.held)

    def committed(self, inventory: Inventory, result: CycleResult, outcome: CommitOutcome) -> None:
        """Bring the rows in line with what a commit wrote: admitted (or lost) jobs leave, reasons are the new ones.
        A placement decided but not committed (its job cancelled meanwhile) leaves capacity the cycle counted taken."""
        if outcome.stale:
            self.forget()
            return
        self.parked = frozenset() if outcome.dropped else result.inadmissible
        self.inputs = inventory.inputs
        self.held = {}
        for hold in result.holds.values():
            self.held[hold.cluster] = self.held.get(hold.cluster, frozenset()) | frozenset(hold.nodes)
        for job_id in (*outcome.admitted, *outcome.dropped):
            self._drop(str(job_id))
        # only the reasons that changed: a new row for each of 100,000 waiting jobs every cycle was garbage the
        # collector's full collections walked, pausing the API in the same process (bench/leader_api.py)
        # (built field by field: `dataclasses.replace` twice a row took 0.5 s of a new leader's first cycle)
        digests: dict[int, int] = {}
        for count, waiting in enumerate(outcome.changed):
            if not count % JOBS_BETWEEN_PAUSES:
                self.pause()
            row = self.rows.get(waiting.job_id)
            if row is not None:
                record = PendingRecord(tenant_id=row.record.tenant_id, reason=waiting.message,
                                       reasons_digest=reasons_digest(waiting.clusters, digests))
                self.rows[waiting.job_id] = _PendingRow(job=row.job, unplaceable=row.unplaceable, record=record,
                                                        requeue_at=row.requeue_at, avoid=row.avoid)
        self.fence = outcome.fence

    def _read(self, session: Session, fence: int, now: float) -> list[int] | None:
        """Refresh the rows: all of them in doubt, else the new ones only (and drop those no longer pending).
        A manifest never changes after submission: those parsed already are kept through a full read.
        Rows are read a slice at a time, so that no more than a slice's manifests and reasons are in memory at once (and
        the distinct JSON texts decoded: jobs of one shape share theirs).
        Returns the jobs whose earlier placements to read: those just read and those placed before (None: all)."""
        columns = select(Job.id, Job.tenant_id, Job.priority, Job.submitted_at, Job.reason,
                         json_text(Job.waiting_reasons), QueueRow.name, TenantRow.name, json_text(Job.avoid),
                         Job.requeue_at) \
            .join(QueueRow, QueueRow.id == Job.queue_id).join(TenantRow, TenantRow.id == Job.tenant_id)
        kept = self.rows
        full = self.fence != fence or self.reads_all(now)
        if full:
            wanted = sorted(_pending_ids(session))
            self.rows, self.ids, self.plain, self.queued, self.others = {}, set(), {}, {}, set()
            self.digest, self.parked, self.parts = _IdDigest(), frozenset(), {}
            self.full_read_at, self.full_reads = now, self.full_reads + 1
        else:
            wanted = self._new_ids(session)
        self.fence = fence
        recorded: dict[str | None, tuple[PlacementSpec, str] | None] = {None: None}  # `_recorded`'s memo
        digests, texts = SharedJson(stored_reasons_digest), SharedJson()  # jobs of one shape: the same reasons
        for chunk in in_chunks(wanted):
            rows = session.execute(columns.where(Job.id.in_(chunk))).all()
            new = [row.id for row in rows if str(row.id) not in kept]  # a kept row's spec is kept with it
            records = dict(session.execute(select(Job.id, Job.placement_spec).where(Job.id.in_(new))).all()) \
                if new else {}
            missing = [job_id for job_id, text in records.items() if _recorded(text, recorded, self.parts) is None]
            manifests = dict(session.execute(select(Job.id, Job.manifest).where(Job.id.in_(missing))).all()) \
                if missing else {}
            for row in rows:
                self.pause()
                record = PendingRecord(row.tenant_id, row.reason, digests(row.waiting_reasons))
                self._keep(row.id, _pending_row(row, record, texts(row.avoid), kept.get(str(row.id)),
                                                recorded[records.get(row.id)], manifests.get(row.id), self.parts),
                           in_order=not full)
        if full:  # each queue sorted once, rather than each job put in its place
            self.queued = Backlog.of(self.plain.values()).queues
        return None if full else sorted({*wanted, *map(int, self.others)})

    def _new_ids(self, session: Session) -> list[int]:
        """The ids pending now and not kept, once those no longer pending are dropped. Most cycles, the database's
        digest of the pending ids (`_IdDigest`) is that of the kept ones and those above the highest kept: no more
        to read. Else (a job cancelled, requeued, or committed out of id order) every pending id is read."""
        above = max(self.ids, default=0)
        new = set(session.scalars(select(Job.id).where(*_PENDING, Job.id > above))) - self.ids
        digest = session.execute(select(*_IdDigest.of_column(Job.id)).where(*_EVERY_PENDING)).one()
        if self.digest.with_(new) == tuple(map(int, digest)):
            return sorted(new)
        ids = _pending_ids(session)
        for gone in self.ids - ids:
            self._drop(str(gone))
        return sorted(ids - self.ids)

    def _keep(self, job_id: int, row: _PendingRow, in_order: bool = True) -> None:
        """Keep the row; a plain job also in its queue's order, unless `in_order` is False (the caller sorts)."""
        key = str(job_id)
        self.rows[key] = row
        if job_id not in self.ids:
            self.ids.add(job_id)
            self.digest.add(job_id)
        self._unplain(key)
        if row.job is not None and row.requeue_at is None and not row.avoid:
            self.plain[key] = row.job
            self.others.discard(key)
            if in_order:
                insort(self.queued.setdefault(row.job.queue, []), row.job, key=QUEUE_ORDER)
        else:
            self.others.add(key)

    def _drop(self, job_id: str) -> None:
        self.rows.pop(job_id, None)
        if int(job_id) in self.ids:
            self.ids.remove(int(job_id))
            self.digest.add(int(job_id), -1)
        self._unplain(job_id)
        self.others.discard(job_id)

    def _unplain(self, job_id: str) -> bool:
        """Take the job out of the plain ones (and its queue's order), if it is one; was it?"""
        job = self.plain.pop(job_id, None)
        if job is None:
            return False
        listed = self.queued[job.queue]
        index = bisect_left(listed, job.queue_order, key=QUEUE_ORDER)
        if index == len(listed) or listed[index] is not job:
            raise RuntimeError(f"job {job_id} is not where its queue's order puts it: the kept queues are out of step")
        del listed[index]
        return True

    def single_out(self, job_ids: Iterable[str]) -> None:
        """These jobs were placed before: from now on a cycle reads their previous clusters and held parts."""
        for job_id in job_ids:
            if self._unplain(job_id):
                self.others.add(job_id)


_PRIME = 1_000_003  # `_IdDigest`'s powers are taken modulo it


@dataclass(slots=True)
class _IdDigest:
    """How many ids a set holds, and the sums of the ids, their squares and their cubes (the powers modulo a prime,
    so that the database's integers do not overflow). Sets with one digest are the same unless at least four ids
    went out and four came in at once, chosen to match (as 1, 5, 8, 12 and 2, 3, 10, 11 do): the next full read
    repairs that, and meanwhile a cancelled job is only refused at the commit, a requeued one waits."""

    count: int = 0
    total: int = 0
    squares: int = 0
    cubes: int = 0

    @staticmethod
    def of_column(column) -> tuple:
        residue = column % _PRIME
        square = residue * residue % _PRIME
        return (func.count(column), func.coalesce(func.sum(column), 0), func.coalesce(func.sum(square), 0),
                func.coalesce(func.sum(square * residue % _PRIME), 0))

    def add(self, job_id: int, sign: int = 1) -> None:
        residue = job_id % _PRIME
        square = residue * residue % _PRIME
        self.count, self.total = self.count + sign, self.total + sign * job_id
        self.squares, self.cubes = self.squares + sign * square, self.cubes + sign * (square * residue % _PRIME)

    def with_(self, ids: Iterable[int]) -> tuple[int, int, int, int]:
        more = _IdDigest(self.count, self.total, self.squares, self.cubes)
        for job_id in ids:
            more.add(job_id)
        return more.count, more.total, more.squares, more.cubes



def _pending_ids(session: Session) -> set[int]:
    """Which jobs are pending, in one row: SQLite's driver lets go of the GIL for each row it steps through, and while
    the API's threads were busy it waited to get it back each time — 100,000 ids as rows took 0.8 s of a cycle (50 ms
    in a quiet process), as one string 50 ms either way."""
    listed = session.scalar(select(func.aggregate_strings(cast(Job.id, String), ",")).where(*_EVERY_PENDING))
    return set(map(int, listed.split(","))) if listed else set()


def _recorded(text: str | None, memo: dict[str | None, tuple[PlacementSpec, str] | None],
              parts: dict[str, tuple[PartSpec, ...]]) -> tuple[PlacementSpec, str] | None:
    """The spec and shape a job's `placement_spec` record holds, once per text (the jobs of one template share one;
    its parts are those of its shape, `parts`); None without a record this version reads (submitted before records
    were written): its manifest is parsed."""
    if text not in memo:
        try:
            spec = from_placement_record(text)
        except (ValueError, KeyError, TypeError):
            memo[text] = None
        else:
            shape = sys.intern(shape_of(spec))
            shared = parts.setdefault(shape, spec.parts)
            memo[text] = (spec if shared is spec.parts else replace(spec, parts=shared)), shape
    return memo[text]


def _pending_row(row: Any, record: PendingRecord, avoid: Mapping[str, str] | None, kept: _PendingRow | None,
                 recorded: tuple[PlacementSpec, str] | None, manifest: dict | None,
                 parts: dict[str, tuple[PartSpec, ...]]) -> _PendingRow:
    """The row as read, with its placement spec: kept from an earlier read, else its record's (`_recorded`), else
    its manifest parsed. Jobs of one shape share one copy of their parts (`parts`, by shape): at 100,000 pending
    jobs that is a hundred megabytes less."""
    job_id = str(row.id)
    requeue_at = row.requeue_at and as_utc(row.requeue_at)
    if kept is not None and kept.unplaceable is not None:
        return replace(kept, record=record, requeue_at=requeue_at)
    if kept is not None:
        spec, shape = kept.job.spec, kept.job.shape
        parts.setdefault(shape, spec.parts)
    elif recorded is not None:
        spec, shape = recorded
    else:
        try:
            spec = parse_jobset(manifest)
        except JobSetError as exc:
            return _PendingRow(None, Waiting(job_id, f"its manifest cannot be placed: {exc}"), record, requeue_at, None)
        shape = sys.intern(shape_of(spec))  # one string per shape, however many jobs have it
        shared = parts.setdefault(shape, spec.parts)
        if shared is not spec.parts:
            spec = replace(spec, parts=shared)
    job = PendingJob(job_id, row[7], row[6], row.priority, as_utc(row.submitted_at).timestamp(), spec, shape=shape)
    return _PendingRow(job, None, record, requeue_at, avoid or None)


def _read_pending(session: Session, inventory: Inventory, pending: PendingJobs) -> None:
    placed_before = pending._read(session, inventory.fence, inventory.snapshot.now)
    now = datetime.fromtimestamp(inventory.snapshot.now, timezone.utc)
    previous: dict[str, set[str]] = {}
    newest: dict[tuple[str, str], tuple[int, str]] = {}
    # Their earlier placements: every pending job's on a full read; else those of the rows just read and of the jobs
    # placed before (`single_out`), as the others have none — a job gets placements only by leaving the pending set.
    columns = select(PlacementRow.job_id, PlacementRow.part, PlacementRow.cluster_name, PlacementRow.generation,
                     PlacementRow.state)
    if placed_before is None:
        rows = session.execute(columns.join(Job, Job.id == PlacementRow.job_id).where(*_PENDING)).all()
    else:
        rows = [row for chunk in in_chunks(placed_before)
                for row in session.execute(columns.where(PlacementRow.job_id.in_(chunk)))]
    for job_id, part, cluster, generation, state in rows:
        key = (str(job_id), part)
        inventory.generations[key] = max(generation, inventory.generations.get(key, 0))
        newest[key] = max(newest.get(key, (0, "")), (generation, state))
        previous.setdefault(str(job_id), set()).add(cluster)
    # A split job back in its queue with some parts still held (running elsewhere, or done) has only
    # the others placed again: a failed part is re-placed alone.
    held: dict[str, set[str]] = {}
    for (job_id, part), (_, state) in newest.items():
        if part and state in HELD_STATES:
            held.setdefault(job_id, set()).add(part)
    pending.single_out(previous.keys() & pending.plain.keys())
    inventory.records = _Records(pending.rows)
    others: dict[str, list[PendingJob]] = {}
    for job_id in sorted(pending.others):
        row = pending.rows[job_id]
        if row.requeue_at is not None and row.requeue_at > now:
            continue  # backing off
        if row.unplaceable is not None:
            inventory.unplaceable[job_id] = row.unplaceable
            continue
        job = row.job
        if held.get(job_id):  # the parts left are another shape: the engine shares answers by shape
            spec = replace(job.spec, parts=tuple(p for p in job.spec.parts if p.name not in held[job_id]))
            job = replace(job, spec=spec, shape=sys.intern(shape_of(spec)))
        if job_id in previous or row.avoid:
            job = replace(job, previous_clusters=tuple(sorted(previous.get(job_id, ()))),
                          avoided=_avoided(row.avoid, now))
        if job.spec.parts:
            others.setdefault(job.queue, []).append(job)
    queues = dict(pending.queued)  # the kept lists (the commit changes them after the cycle), merged where others go
    for name, jobs in others.items():
        queues[name] = _merged(queues.get(name, []), jobs)
    inventory.pending = Backlog(queues)


# Up to this many jobs are put into a queue's kept order one by one (a search and a move each); more, and the queue
# is sorted once with them (a key and a comparison per job: 10,000 requeued jobs put one by one into a queue of
# 100,000 took 0.2 s, sorted with it 25 ms).
MERGED_ONE_BY_ONE = 64


def _merged(kept: list[PendingJob], more: list[PendingJob]) -> list[PendingJob]:
    """A new list of the kept queue's jobs and `more`, in queue order; `kept` is left as it was."""
    if len(more) > MERGED_ONE_BY_ONE:
        return sorted(kept + more, key=QUEUE_ORDER)
    merged = list(kept)
    for job in more:
        insort(merged, job, key=QUEUE_ORDER)
    return merged


class _Records(Mapping[str, PendingRecord]):
    """The kept pending rows' records as the commit looks them up, with no copy of 100,000 of them each cycle."""

    __slots__ = ("rows",)

    def __init__(self, rows: Mapping[str, _PendingRow]) -> None:
        self.rows = rows

    def __getitem__(self, job_id: str) -> PendingRecord:
        return self.rows[job_id].record

    def __iter__(self) -> Iterator[str]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def _avoided(avoid: Mapping[str, str] | None, now: datetime) -> Mapping[str, str]:
    """The clusters a job still avoids after startup evictions, with until when (`04:42:10 UTC`)."""
    until = {cluster: datetime.fromisoformat(moment) for cluster, moment in (avoid or {}).items()}
    return MappingProxyType({cluster: f"{moment:%H:%M:%S} UTC" for cluster, moment in until.items() if moment > now})


# -- 3. the commit -----------------------------------------------------------------------------------
def _lock_for_commit(session: Session) -> None:
    """Serialise schedulers' commits: the PostgreSQL advisory lock (on SQLite, `Database.write` holds the write lock
    from its BEGIN)."""
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SCHEDULER_LOCK_KEY})")


@dataclass(frozen=True, slots=True)
class Decisions:
    """Some jobs' decisions out of a cycle's (`CycleResult`): their placements and the preemptions that make room."""

    placements: tuple[Placement, ...]
    preemptions: tuple[Preemption, ...]


def decisions_by_job(result: CycleResult) -> list[Decisions]:
    """A cycle's decisions per placed job, in the order it decided them: each job with the preemptions it needs."""
    preemptions: dict[str, list[Preemption]] = {}
    for preemption in result.preemptions:
        preemptions.setdefault(preemption.preemptor, []).append(preemption)
    placements: dict[str, list[Placement]] = {}
    for placement in result.placements:
        placements.setdefault(placement.job_id, []).append(placement)
    return [Decisions(tuple(placed), tuple(preemptions.get(job_id, ()))) for job_id, placed in placements.items()]


def commit_decisions(session: Session, inventory: Inventory, decisions: Decisions, fence: int) -> CommitOutcome:
    """Write some jobs' decisions of a cycle in a fresh `Database.write()` session, which commits them.

    1. Take the commit lock; drop everything if another scheduler placed anything since (the newest placement id
       is not `fence`: the read's, or what the slice before left, `commit_cycle`).
    2. Lock the jobs it admits and preempts, ids ascending, before any of their placements, as every batch locks
       them (`lock_job_rows`); admit each placed job still Queued as read, with a conditional UPDATE (`_admit`);
       only admitted jobs get placements.
    3. Insert their placements (state Decided, next generation per job and part).
    4. Mark the live placements their admission preempts Deleting.
    5. One event per admitted job and per preempted job.
    The waiting jobs' reasons follow in transactions of their own (`write_reasons`).
    """
    outcome = CommitOutcome()
    _lock_for_commit(session)
    if (session.scalar(select(func.max(PlacementRow.id))) or 0) != fence:
        outcome.stale = True
        return outcome
    outcome.fence = fence
    now = datetime.now(timezone.utc)
    events: list[dict[str, Any]] = []

    by_job: dict[str, list[Placement]] = {}
    for placement in decisions.placements:
        by_job.setdefault(placement.job_id, []).append(placement)
    lock_job_rows(session, [int(job_id) for job_id in (*by_job, *(p.job_id for p in decisions.preemptions))])
    admitted = _admit(session, inventory, [int(j) for j in by_job], now)
    outcome.admitted = sorted(admitted)
    outcome.dropped = sorted(int(j) for j in by_job if int(j) not in admitted)

    victims: dict[str, dict[str, str]] = {}  # preemptor -> victim job id -> rule
    for preemption in decisions.preemptions:
        victims.setdefault(preemption.preemptor, {})[preemption.job_id] = preemption.rule
    rows = []
    for job_id, placements in by_job.items():
        if int(job_id) not in admitted:
            continue
        for placement in placements:
            rows.append(_placement_row(placement, inventory, now))
        events.append(_event(job_id, "Admitted", _placed_message(placements) + _preempting(victims.get(job_id, {})),
                             inventory.records[job_id].tenant_id, now))
    if rows:
        session.execute(insert(PlacementRow.__table__), rows)
        outcome.fence = session.scalar(select(func.max(PlacementRow.id)))
    outcome.placements = len(rows)

    preempted: dict[str, str] = {}
    for preemption in decisions.preemptions:
        if int(preemption.preemptor) not in admitted:
            continue
        marked = session.execute(
            update(PlacementRow)
            .where(PlacementRow.job_id == int(preemption.job_id), PlacementRow.part == (preemption.part or ""),
                   PlacementRow.cluster_name == preemption.cluster, PlacementRow.state.in_(PLACEMENT_ACTIVE_STATES))
            .values(state="Deleting", last_error=preemption.message)
            .execution_options(synchronize_session=False)).rowcount
        outcome.preempted += marked
        if marked:
            preempted[preemption.job_id] = preemption.message
    for job_id, message in preempted.items():
        events.append(_event(job_id, "Preempted", message, inventory.tenant_ids.get(job_id), now, warning=True))
    events += _fail_on_preemption(session, preempted, inventory, now)

    if events:
        session.execute(insert(Event.__table__), events)
    return outcome


# Waiting reasons written per transaction, at most: a new leader's first cycle over 100,000 pending jobs rewrites
# nearly all of them, and one transaction would hold SQLite's write lock from every submission for seconds (1,000 a
# slice held it 92 ms typically, 740 ms at p99, in bench/leader_api.py; a submission waits for at most one loop
# transaction). Fewer where they take longer than `WriteSlices.budget`.
REASONS_PER_TRANSACTION = 200


# Jobs whose decisions are committed per transaction, at most: a new leader's first cycle admits thousands at once
# (2,000 held SQLite's write lock 130 ms in bench/leader_api.py, every submission waiting; over more capacity, longer).
# Fewer where they take longer than `WriteSlices.budget`.
JOBS_PER_TRANSACTION = 500


def commit_cycle(database: Database, inventory: Inventory, result: CycleResult) -> CommitOutcome:
    """The decisions, a slice of jobs per transaction in the order the cycle decided them (`commit_decisions`, each
    fenced on what the slice before left), then the reasons that changed, a slice per transaction. A slice finding
    that another scheduler committed since drops itself and the rest: the outcome is `stale`, with what the slices
    before it committed. At least one transaction: a cycle that placed nothing still learns whether it is stale."""
    outcome, jobs = CommitOutcome(fence=inventory.fence), decisions_by_job(result)
    slices, start = WriteSlices(most=JOBS_PER_TRANSACTION), 0
    while True:
        taken = jobs[start:start + slices.size]
        decisions = Decisions(tuple(p for job in taken for p in job.placements),
                              tuple(p for job in taken for p in job.preemptions))
        with database.write() as session, slices.timed(len(taken)):
            committed = commit_decisions(session, inventory, decisions, outcome.fence)
        if committed.stale:
            outcome.stale = True
            return outcome
        outcome.add(committed)
        start += len(taken)
        if start >= len(jobs):
            break
    outcome.changed = changed_reasons(inventory, result)
    write_in_slices(database, outcome.changed, most=REASONS_PER_TRANSACTION,
                    write=lambda session, written: write_reasons(session, inventory, written))
    return outcome


def changed_reasons(inventory: Inventory, result: CycleResult) -> list[Waiting]:
    """The waiting jobs whose reasons differ from those stored: the only ones written. Ids ascending, so that each
    slice `commit_cycle` writes is rows that sit together in the table (in the cycle's order of decisions, each
    slice of 200 touched pages all over it, and committing them took four times as long)."""
    digests: dict[int, int] = {}
    changed = [waiting for waiting in [*result.waiting.values(), *inventory.unplaceable.values()]
               if waiting.message != inventory.records[waiting.job_id].reason
               or reasons_digest(waiting.clusters, digests) != inventory.records[waiting.job_id].reasons_digest]
    changed.sort(key=lambda waiting: int(waiting.job_id))
    return changed


def write_reasons(session: Session, inventory: Inventory, changed: Sequence[Waiting]) -> None:
    """Store these jobs' reasons (those still Queued), with a Waiting event for each whose summary changed.
    After the decisions' commit, in slices of `REASONS_PER_TRANSACTION`: a reason is what one cycle saw, and the
    next one writes it again if it was lost. Rows ids ascending, the order every batch locks jobs in: in the cycle's
    order of decisions, a slice and a batch that lock two of them could each hold what the other waits for."""
    now = datetime.now(timezone.utc)
    jobs = Job.__table__
    stored: dict[int, str] = {}  # each reasons mapping as stored and encoded, once (jobs of a shape share one)
    rows = []
    for w in changed:
        if id(w.clusters) not in stored:
            stored[id(w.clusters)] = json.dumps(by_reason(w.clusters))
        rows.append({"job_id": int(w.job_id), "new_reason": w.message, "new_reasons": stored[id(w.clusters)]})
    rows.sort(key=itemgetter("job_id"))
    session.execute(update(jobs).where(jobs.c.id == bindparam("job_id"), jobs.c.state == "Queued")
                    .values(reason=bindparam("new_reason"), waiting_reasons=bindparam("new_reasons", type_=JsonText)),
                    rows)
    events = [_event(w.job_id, "Waiting", w.message, inventory.records[w.job_id].tenant_id, now)
              for w in changed if w.message != inventory.records[w.job_id].reason]
    if events:
        session.execute(insert(Event.__table__), events)


def _fail_on_preemption(session: Session, preempted: Mapping[str, str], inventory: Inventory,
                        now: datetime) -> list[dict[str, Any]]:
    """Fail the preempted jobs that asked for it (`archipelago.io/on-preemption: fail`); the others go back to
    their queue once their copies are gone. A failed job's copies are deleted as any finished job's are."""
    if not preempted:
        return []
    policy = Job.manifest[("metadata", "annotations", ON_PREEMPTION_ANNOTATION)].as_string()
    failing = [str(job_id) for job_id, in session.execute(
        select(Job.id).where(Job.id.in_([int(j) for j in preempted]), policy == "fail",
                             Job.state.not_in(JOB_FINISHED_STATES)))]
    events = []
    for job_id in failing:
        reason = f"{preempted[job_id]}; failed, as its {ON_PREEMPTION_ANNOTATION} annotation asks"
        session.execute(update(Job).where(Job.id == int(job_id)).values(state="Failed", finished_at=now,
                                                                         reason=reason)
                        .execution_options(synchronize_session=False))
        events.append(_event(job_id, "Failed", reason, inventory.tenant_ids.get(job_id), now, warning=True))
    return events


def _admit(session: Session, inventory: Inventory, job_ids: Sequence[int], now: datetime) -> set[int]:
    """Queued → Admitted for the jobs still Queued and not cancelled, and not requeued since the cycle's read (their
    reason is the one it read: a split job's part that failed meanwhile is requeued with the job still Queued, and
    the cycle placed only the parts it saw lost); returns those it moved. Their rows are locked (`lock_job_rows`)."""
    admitted: set[int] = set()
    for chunk in in_chunks(job_ids):
        chunk = [job_id for job_id, reason in session.execute(select(Job.id, Job.reason).where(Job.id.in_(chunk)))
                 if reason == inventory.records[str(job_id)].reason]
        admitted.update(session.scalars(
            update(Job).where(Job.id.in_(chunk), Job.state == "Queued", Job.cancel_requested_at.is_(None))
            .values(state="Admitted", admitted_at=now, reason=None, waiting_reasons={})
            .returning(Job.id).execution_options(synchronize_session=False)))
    return admitted


def _placement_row(placement: Placement, inventory: Inventory, now: datetime) -> dict[str, Any]:
    part = placement.part or ""
    total: dict[str, int] = {}
    for usage in placement.node_usage.values():
        for resource, amount in usage.items():
            total[resource] = total.get(resource, 0) + amount
    return {
        "job_id": int(placement.job_id), "part": part, "cluster_id": inventory.cluster_ids[placement.cluster],
        "cluster_name": placement.cluster, "hypernode": placement.hypernode, "tier": placement.tier,
        "assignments": [{"node": a.node, "replicatedJob": a.replicated_job, "pods": a.pods}
                        for a in placement.assignments],
        "node_usage": {node: dict(usage) for node, usage in placement.node_usage.items()},
        "exclusive_topology": placement.exclusive_domains[0][0] if placement.exclusive_domains else None,
        "resources": total, "generation": inventory.generations.get((placement.job_id, part), 0) + 1,
        "state": "Decided", "created_at": now,
    }


def _placed_message(placements: list[Placement]) -> str:
    """"placed on eu-west, HyperNode leaf-3 (tier 1)"; one clause per part of a split job."""
    clauses = []
    for p in placements:
        where = f"HyperNode {p.hypernode} (tier {p.tier})" if p.hypernode else "spanning HyperNodes"
        clauses.append(f"{p.part + ' ' if p.part else ''}on {p.cluster}, {where}")
    return "placed " + "; ".join(clauses)


RULE_WORDS = {"WithinQueue": "lower priority, same queue",
              "ReclaimWithinCohort": "borrowed from this queue's nominal quota, reclaimed",
              "FairSharing": "its tenant above its fair share, this one below"}


def _preempting(victims: Mapping[str, str]) -> str:
    """"; preempting job 4 (lower priority, same queue)" — the preemptor's side of its preemptions."""
    if not victims:
        return ""
    return "; preempting " + ", ".join(f"job {v} ({RULE_WORDS[rule]})" for v, rule in sorted(victims.items()))


def _event(job_id: str, reason: str, message: str, tenant_id: int | None, now: datetime, *,
           warning: bool = False) -> dict[str, Any]:
    return {"kind": "job", "object_id": job_id, "reason": reason, "message": message, "tenant_id": tenant_id,
            "type": "Warning" if warning else "Normal", "time": now}


# -- dry run -------------------------------------------------------------------------------------------
def dry_run_manifest(session: Session, manifest: dict, tenant_name: str | None, settings: Settings,
                     *, now: float | None = None) -> DryRun:
    """Where would this JobSet go now, and why: the engine's answer over a fresh snapshot, nothing written.

    The queue is the manifest's `kueue.x-k8s.io/queue-name` label, else the tenant's default queue;
    the priority comes from its priority class. Raises JobSetError for a manifest, a queue or a
    priority class the tenant could not submit. Call on a fresh `Database.read()` session.
    """
    spec = parse_jobset(manifest)
    priority_class = spec.priority_class or settings.default_priority_class
    if priority_class not in settings.priority_classes:
        raise JobSetError("metadata.labels['kueue.x-k8s.io/priority-class']",
                          f"unknown priority class {priority_class!r}; one of {', '.join(settings.priority_classes)}")
    clock = datetime.now(timezone.utc).timestamp() if now is None else now
    inventory = read_inventory(session, now=clock, with_pending=False)
    queues = select(QueueRow.name, TenantRow.name).join(TenantRow)
    label = "metadata.labels['kueue.x-k8s.io/queue-name']"
    if spec.queue is None:
        found = session.execute(queues.where(TenantRow.name == tenant_name, QueueRow.is_default)).first()
        if found is None:
            raise JobSetError(label, "name a queue: the tenant has no default queue")
    else:
        found = session.execute(queues.where(QueueRow.name == spec.queue)).first()
        if found is None or (tenant_name is not None and found[1] != tenant_name):
            raise JobSetError(label, f"queue {spec.queue!r} does not exist{' for this tenant' if found else ''}")
    queue_name, owner = found
    job = PendingJob("dry-run", owner, queue_name, settings.priority_classes[priority_class], clock, spec)
    return dry_run(inventory.snapshot, job, engine_config(settings))
