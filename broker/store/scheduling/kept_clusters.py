"""The cluster half of the scheduler's snapshot, kept between cycles: clusters, their nodes and HyperNodes, and the
live placements, read again only where they changed."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Callable, Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.engine.placement import Cluster, HyperNode, Node, RunningPlacement
from broker.engine.placement.model import no_pause
from broker.engine.placement.snapshot import ClusterIndex
from broker.store.db.models import (PLACEMENT_LIVE_STATES, Cluster as ClusterRow, HyperNode as HyperNodeRow, Job,
                                    Node as NodeRow, Placement as PlacementRow, Queue as QueueRow, SharedJson,
                                    Tenant as TenantRow, as_utc, json_text)
from broker.store.db.session import in_chunks
from clusters.rules.quantity import add_into


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
    the same transaction (`broker.store.db.models.inventory_changed`; a cluster is known by its id and registration time),
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
        NODES_BETWEEN_PAUSES nodes (for a process whose requests go first, `broker.process.courtesy`): once every member's
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
                                              json_text(NodeRow.placement_used), json_text(NodeRow.device_use))
                                       .where(NodeRow.cluster_id.in_(chunk))
                                       .order_by(NodeRow.cluster_id, NodeRow.name)):
                if not read % NODES_BETWEEN_PAUSES:
                    pause()
                read += 1
                allocatable, used, placement_used = texts(row.allocatable), texts(row.used), texts(row.placement_used)
                devices = texts(row.device_use)
                if devices:  # what its DRA devices hold, counted as resources beside its own (clusters.device_use)
                    allocatable, used, placement_used = _with_devices(allocatable, used, placement_used, devices)
                node = Node(row.name, allocatable, used, texts(row.labels), tuple(texts(row.taints)),
                            row.unschedulable or not row.ready)
                nodes[row.cluster_id].append(_NodeRow(node, placement_used or {}))
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
                          Job.priority, Job.tenant_id, QueueRow.name.label("queue"), TenantRow.name.label("tenant"),
                          Job.declared_runtime, Job.runtime_bound)
                   .join(Job, Job.id == PlacementRow.job_id).join(QueueRow, QueueRow.id == Job.queue_id)
                   .join(TenantRow, TenantRow.id == Job.tenant_id))


def _with_devices(allocatable: Mapping[str, int], used: Mapping[str, int],
                  placement_used: Mapping[str, Mapping[str, int]] | None, devices: Mapping[str, Any]) -> tuple:
    allocatable, used = dict(allocatable), dict(used)
    add_into(allocatable, devices.get("allocatable") or {})
    add_into(used, devices.get("used") or {})
    placements = {p: dict(amounts) for p, amounts in (placement_used or {}).items()}
    for placement, amounts in (devices.get("placement_used") or {}).items():
        add_into(placements.setdefault(placement, {}), amounts)
    return allocatable, used, placements


def _running(row: Any, change: Any, pods_of: Mapping[str, Mapping[str, Mapping[str, int]]]) -> RunningPlacement:
    pods: dict[str, int] = {}
    for a in row.assignments:
        pods[a["node"]] = pods.get(a["node"], 0) + a["pods"]
    started = as_utc(change.started_at or row.created_at).timestamp()
    runtime = row.declared_runtime or row.runtime_bound  # what backfill trusts: what the job says, not a guess
    return RunningPlacement(
        job_id=str(row.job_id), part=row.part or None, cluster=row.cluster_name, hypernode=row.hypernode,
        node_usage=_held(row.node_usage, pods_of.get(str(row.id), {})), node_pods=pods, tenant=row.tenant,
        queue=row.queue, priority=row.priority, started_at=started,
        exclusive_topology=row.exclusive_topology, charged=change.state != "Deleting",
        expected_end=None if runtime is None else started + runtime)


def _held(reserved: Mapping[str, Mapping[str, int]], pods: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Per node and resource, the larger of a placement's reservation and what its pods there request."""
    held = {node: dict(amounts) for node, amounts in reserved.items()}
    for node, amounts in pods.items():
        mine = held.setdefault(node, {})
        for resource, amount in amounts.items():
            mine[resource] = max(mine.get(resource, 0), amount)
    return held
