"""The capacity views: per cluster and HyperNode, what is allocatable, used and free, as the API and the dashboard
show it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from broker.store.db.models import Cluster, CounterSet, Device, DeviceClass, HyperNode, Node, as_utc
from broker.store.inventory.registration import get_cluster
from clusters.rules.quantity import add_into, format_quantity


@dataclass
class Capacity:
    """Allocatable, used and free milli-units of one node or one HyperNode (sums over its nodes).
    Free counts only nodes that take pods (ready, not cordoned), never below zero per node."""

    cluster_id: int
    kind: str  # node | hypernode
    name: str
    tier: int | None = None
    parent: str | None = None
    nodes: int = 1
    allocatable: dict[str, int] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)
    free: dict[str, int] = field(default_factory=dict)


_CAPACITY_SQL = {
    "sqlite": """
WITH per_node AS (
  SELECT n.cluster_id, n.name, r.key AS resource, CAST(r.value AS INTEGER) AS allocatable,
         CAST(COALESCE(json_extract(n.used, '$."' || r.key || '"'), 0) AS INTEGER) AS used,
         n.unschedulable OR NOT n.ready AS blocked
  FROM nodes n, json_each(n.allocatable) r {where_node}
), node_free AS (
  SELECT *, CASE WHEN blocked THEN 0 ELSE MAX(allocatable - used, 0) END AS free FROM per_node
)
SELECT cluster_id, 'node' AS kind, name, NULL AS tier, NULL AS parent, 1 AS nodes, resource, allocatable, used, free
FROM node_free
UNION ALL
SELECT h.cluster_id, 'hypernode', h.name, h.tier, h.parent, json_array_length(h.nodes), p.resource,
       SUM(p.allocatable), SUM(p.used), SUM(p.free)
FROM hypernodes h LEFT JOIN json_each(h.nodes) m ON 1 = 1
     LEFT JOIN node_free p ON p.cluster_id = h.cluster_id AND p.name = m.value {where_hypernode}
GROUP BY h.id, p.resource
""",
    "postgresql": """
WITH per_node AS (
  SELECT n.cluster_id, n.name, r.key AS resource, r.value::bigint AS allocatable,
         COALESCE((n.used ->> r.key)::bigint, 0) AS used, n.unschedulable OR NOT n.ready AS blocked
  FROM nodes n CROSS JOIN LATERAL jsonb_each_text(n.allocatable) r {where_node}
), node_free AS (
  SELECT *, CASE WHEN blocked THEN 0 ELSE GREATEST(allocatable - used, 0) END AS free FROM per_node
)
SELECT cluster_id, 'node' AS kind, name, NULL::integer AS tier, NULL AS parent, 1 AS nodes, resource,
       allocatable, used, free
FROM node_free
UNION ALL
SELECT h.cluster_id, 'hypernode', h.name, h.tier, h.parent, jsonb_array_length(h.nodes), p.resource,
       SUM(p.allocatable), SUM(p.used), SUM(p.free)
FROM hypernodes h LEFT JOIN LATERAL jsonb_array_elements_text(h.nodes) m(value) ON true
     LEFT JOIN node_free p ON p.cluster_id = h.cluster_id AND p.name = m.value {where_hypernode}
GROUP BY h.id, p.resource
""",
}


def cluster_capacity(session: Session, cluster_id: int | None = None) -> list[Capacity]:
    """Free capacity per node and per HyperNode (of one cluster, or all), in one query."""
    sql = _CAPACITY_SQL[session.get_bind().dialect.name].format(
        where_node="WHERE n.cluster_id = :cluster_id" if cluster_id is not None else "",
        where_hypernode="WHERE h.cluster_id = :cluster_id" if cluster_id is not None else "")
    entries: dict[tuple[int, str, str], Capacity] = {}
    for row in session.execute(text(sql), {"cluster_id": cluster_id} if cluster_id is not None else {}):
        key = (row.cluster_id, row.kind, row.name)
        entry = entries.get(key)
        if entry is None:
            entry = entries[key] = Capacity(row.cluster_id, row.kind, row.name, row.tier, row.parent, row.nodes)
        if row.resource is not None:
            entry.allocatable[row.resource] = int(row.allocatable)
            entry.used[row.resource] = int(row.used)
            entry.free[row.resource] = int(row.free)
    return list(entries.values())


def _amounts(allocatable: Mapping[str, int], used: Mapping[str, int], free: Mapping[str, int]) -> dict[str, dict]:
    """Per resource: milli-units for programs, and the same in Kubernetes units for people."""
    out = {}
    for resource in sorted(allocatable):
        values = {"allocatable": allocatable[resource], "used": used.get(resource, 0), "free": free.get(resource, 0)}
        out[resource] = {**{f"{k}_milli": v for k, v in values.items()},
                         **{k: format_quantity(v, resource) for k, v in values.items()}}
    return out


def cluster_view(session: Session, cluster: Cluster, *, tree: bool = True,
                 capacity: list[Capacity] | None = None) -> dict[str, Any]:
    """What the API answers about a cluster: state, errors, capacity totals, the HyperNode tree.
    Never the kubeconfig."""
    entries = capacity if capacity is not None else cluster_capacity(session, cluster.id)
    nodes = [e for e in entries if e.kind == "node"]
    allocatable: dict[str, int] = {}
    used: dict[str, int] = {}
    free: dict[str, int] = {}
    for entry in nodes:
        add_into(allocatable, entry.allocatable)
        add_into(used, entry.used)
        add_into(free, entry.free)
    view = {
        "name": cluster.name, "mode": cluster.mode, "api_server": cluster.api_server or None,
        "context": cluster.context,
        "labels": cluster.labels, "taints": cluster.taints, "state": cluster.state,
        "kubernetes_version": cluster.kubernetes_version, "jobset_crd": cluster.jobset_crd,
        "hypernode_source": cluster.hypernode_source, "topology_recipe": cluster.topology_recipe,
        "topology_write_back": cluster.topology_write_back,
        "last_heartbeat": cluster.last_heartbeat and as_utc(cluster.last_heartbeat),
        "unreachable_since": cluster.unreachable_since and as_utc(cluster.unreachable_since),
        "last_error": cluster.last_error, "warnings": cluster.warnings or [],
        "synced_at": cluster.synced_at and as_utc(cluster.synced_at),
        "created_at": as_utc(cluster.created_at),
        "nodes": len(nodes),
        "capacity": _amounts(allocatable, used, free),
    }
    if tree:
        view["hypernodes"] = hypernode_tree([e for e in entries if e.kind == "hypernode"])
        view["devices"] = device_counts(session, cluster.id)
    return view


def device_counts(session: Session, cluster_id: int) -> dict[str, dict[str, int]]:
    """Per DRA driver, how many devices the member publishes and how many a ResourceClaim holds."""
    counts: dict[str, dict[str, int]] = {}
    for driver, allocated_by in session.execute(select(Device.driver, Device.allocated_by)
                                                .where(Device.cluster_id == cluster_id)):
        entry = counts.setdefault(driver, {"devices": 0, "allocated": 0})
        entry["devices"] += 1
        entry["allocated"] += bool(allocated_by)
    return counts


def hypernode_tree(entries: list[Capacity]) -> list[dict[str, Any]]:
    """Nested HyperNodes, highest tier first, each with its free capacity."""
    names = {e.name for e in entries}
    children: dict[str | None, list[Capacity]] = {}
    for entry in sorted(entries, key=lambda e: (-(e.tier or 0), e.name)):
        children.setdefault(entry.parent if entry.parent in names else None, []).append(entry)

    def nest(entry: Capacity) -> dict[str, Any]:
        return {"name": entry.name, "tier": entry.tier, "nodes": entry.nodes,
                "free": {r: format_quantity(v, r) for r, v in sorted(entry.free.items())},
                "free_milli": dict(sorted(entry.free.items())),
                "children": [nest(child) for child in children.get(entry.name, ())]}

    return [nest(root) for root in children.get(None, ())]


def list_views(session: Session) -> list[dict[str, Any]]:
    clusters = session.scalars(select(Cluster).order_by(Cluster.name)).all()
    by_cluster: dict[int, list[Capacity]] = {}
    for entry in cluster_capacity(session):
        if entry.kind == "node":
            by_cluster.setdefault(entry.cluster_id, []).append(entry)
    return [cluster_view(session, c, tree=False, capacity=by_cluster.get(c.id, [])) for c in clusters]


def topology_view(session: Session, cluster: str) -> dict[str, Any]:
    """A cluster's nodes and HyperNodes with allocatable, used and free capacity (the dashboard's topology)."""
    row = get_cluster(session, cluster)
    capacity = cluster_capacity(session, row.id)
    members = dict(session.execute(select(HyperNode.name, HyperNode.nodes).where(HyperNode.cluster_id == row.id)).all())
    tiers = {entry.name: entry.tier for entry in capacity if entry.kind == "hypernode"}
    leaf_of: dict[str, str] = {}
    for name in sorted(tiers, key=lambda n: (-tiers[n], n)):  # the lowest tier holding a node wins
        for node in members.get(name) or []:
            leaf_of[node] = name
    health = {name: (ready, unschedulable) for name, ready, unschedulable in session.execute(
        select(Node.name, Node.ready, Node.unschedulable).where(Node.cluster_id == row.id))}

    def amounts(entry: Capacity) -> dict:
        return {"allocatable_milli": entry.allocatable, "used_milli": entry.used, "free_milli": entry.free}

    return {
        "cluster": row.name,
        "hypernodes": [{"name": e.name, "tier": e.tier, "parent": e.parent, "nodes": e.nodes, **amounts(e)}
                       for e in sorted(capacity, key=lambda e: (-(e.tier or 0), e.name)) if e.kind == "hypernode"],
        "nodes": [{"name": e.name, "hypernode": leaf_of.get(e.name), "ready": health.get(e.name, (True, False))[0],
                   "unschedulable": health.get(e.name, (True, False))[1], **amounts(e)}
                  for e in sorted(capacity, key=lambda e: e.name) if e.kind == "node"],
    }


def devices_view(session: Session, cluster: str) -> dict[str, Any]:
    """A cluster's devices as its DRA drivers publish them: the device classes, every device (its node, attributes,
    capacity, taints and the claims holding it), the counter sets partitionable ones share, and per driver how many
    there are and how many are held. Empty for a member that serves no resource.k8s.io/v1."""
    row = get_cluster(session, cluster)
    devices = session.scalars(select(Device).where(Device.cluster_id == row.id).order_by(Device.name)).all()
    return {
        "cluster": row.name,
        "drivers": device_counts(session, row.id),
        "classes": [{"name": name, "selectors": selectors} for name, selectors in session.execute(
            select(DeviceClass.name, DeviceClass.selectors).where(DeviceClass.cluster_id == row.id)
            .order_by(DeviceClass.name))],
        "devices": [{"driver": d.driver, "pool": d.pool, "name": d.device, "node": d.node,
                     "attributes": d.attributes, "capacity": d.capacity, "consumes_counters": d.consumes,
                     "taints": d.taints, "allocated_by": d.allocated_by} for d in devices],
        "counter_sets": [{"driver": c.driver, "pool": c.pool, "name": c.name.rsplit("/", 1)[1], "counters": c.counters}
                         for c in session.scalars(select(CounterSet).where(CounterSet.cluster_id == row.id)
                                                  .order_by(CounterSet.name))],
    }
