"""Phase 1, the read: one cycle's snapshot in one read transaction, from the clusters kept since the last cycle
(`KeptClusters`) and the pending jobs kept with it (`PendingJobs`)."""

from __future__ import annotations

from typing import Callable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from broker.engine.placement import Cluster, Queue, Snapshot, Tenant
from broker.engine.placement.model import Backlog, no_pause
from broker.store.db.models import Job, Placement as PlacementRow, Queue as QueueRow, Tenant as TenantRow
from broker.store.scheduling.kept_clusters import KeptClusters
from broker.store.scheduling.pending import PENDING, PendingJobs, read_pending
from broker.store.scheduling.records import Inventory


def has_pending(session: Session) -> bool:
    """Is any job waiting for a placement? An idle scheduler skips the snapshot."""
    return session.scalar(select(Job.id).where(*PENDING).limit(1)) is not None


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
        read_pending(session, inventory, PendingJobs() if pending is None else pending)
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
