"""What a member's sync writes: its Kubernetes objects become rows here. `member_inventory` turns nodes, pods and
HyperNodes into node rows (allocatable, used) and a resolved HyperNode tree; `write_inventory` writes only what
differs from the rows already stored; `record_probe` and `record_sync_error` keep its health."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from broker.store import events
from broker.store.db.models import Cluster, CounterSet, Device, DeviceClass, HyperNode, Node, as_utc, inventory_changed
from clusters import jobsets
from clusters.rules.devices import DeviceInventory
from clusters.rules.pods import effective_requests
from clusters.rules.quantity import add_into, to_milli
from broker.store.inventory.devices import node_device_use
from broker.store.inventory.recipes import Discovery
from clusters.topology import Topology, resolve_hypernodes
from clusters.system import made_by_us


def node_row(node: Mapping[str, Any]) -> dict[str, Any]:
    """The columns of one node, from its Kubernetes object."""
    metadata, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
    taints = [{k: t[k] for k in ("key", "value", "effect") if t.get(k)} for t in spec.get("taints") or ()]
    return {"labels": dict(metadata.get("labels") or {}), "taints": taints,
            "unschedulable": bool(spec.get("unschedulable")), "ready": ready,
            "allocatable": {r: to_milli(str(q)) for r, q in (status.get("allocatable") or {}).items()}}


class PodHold(NamedTuple):
    """What one pod holds on its node, and the broker's placement it belongs to (None: someone else's)."""

    node: str
    requests: dict[str, int]  # milli-units, one `pods` slot included
    placement: str | None


def pod_usage(pod: Mapping[str, Any]) -> PodHold | None:
    """The hold of a pod bound to a node that has not finished (Pending on its node holds as Running does)."""
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    total = effective_requests(spec)
    total["pods"] = total.get("pods", 0) + 1000
    return PodHold(spec["nodeName"], total, (metadata.get("labels") or {}).get(jobsets.PLACEMENT_ID_LABEL))


@dataclass
class MemberInventory:
    """What a member holds, as the inventory stores it."""

    nodes: dict[str, dict[str, Any]]  # name -> node_row(...) plus "used"
    topology: Topology
    hypernode_source: str  # crd, labels:<recipe>, labels or none
    devices: DeviceInventory = field(default_factory=DeviceInventory)  # none where the member serves no DRA


def resolve_topology(node_labels: Mapping[str, Mapping[str, str]], hypernodes: Iterable[Mapping] | None,
                     discovery: Discovery) -> tuple[Topology, str]:
    """The member's HyperNode tree and where it came from: its own HyperNode objects when it has any (`crd`), else its
    node labels by its recipe (`labels:<recipe>`, or `labels` by the global list: `clusters.recipes.discover`), else
    `none`."""
    theirs = [h for h in hypernodes or () if not made_by_us(h)]  # the broker's own, written back, describe nothing new
    if theirs:
        return resolve_hypernodes(theirs, node_labels), "crd"
    return discovery.discover(node_labels)


def member_inventory(nodes: Mapping[str, dict[str, Any]], holds: Iterable[PodHold], topology: Topology, source: str,
                     devices: DeviceInventory | None = None) -> MemberInventory:
    """Rows from a member's nodes (name -> node_row) and its pods' holds (pod_usage): `used` by every
    pod, and `placement_used` the part of it held by the pods of each of the broker's placements."""
    rows = {name: {**row, "used": {}, "placement_used": {}} for name, row in nodes.items()}
    for hold in holds:
        if hold.node in rows:
            add_into(rows[hold.node]["used"], hold.requests)
            if hold.placement is not None:
                add_into(rows[hold.node]["placement_used"].setdefault(hold.placement, {}), hold.requests)
    return MemberInventory(rows, topology, source, devices or DeviceInventory())


_DEVICE_FIELDS = ("driver", "pool", "device", "generation", "node", "attributes", "capacity", "consumes", "taints",
                  "allocated_by")
_NODE_FIELDS = ("labels", "taints", "unschedulable", "ready", "allocatable", "used", "placement_used", "device_use")


@dataclass
class WriteResult:
    nodes_added: int = 0
    nodes_changed: int = 0
    nodes_removed: int = 0
    hypernodes_changed: int = 0
    devices_changed: int = 0
    new_warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.nodes_added or self.nodes_changed or self.nodes_removed or self.hypernodes_changed
                    or self.devices_changed)


def _write_rows(session: Session, model: type[Node] | type[HyperNode], cluster_id: int,
                wanted: Mapping[str, Mapping[str, Any]], fields: Sequence[str]) -> tuple[int, int, int]:
    """Make a cluster's rows of `model` equal `wanted` (name -> field values); (added, changed, removed)."""
    stored = {row.name: row for row in session.execute(
        select(model.id, model.name, *(getattr(model, f) for f in fields)).where(model.cluster_id == cluster_id))}
    added, changed = [], []
    for name, values in wanted.items():
        old = stored.pop(name, None)
        if old is None:
            added.append({"cluster_id": cluster_id, "name": name, **values})
        elif any(getattr(old, f) != values[f] for f in fields):
            changed.append({"id": old.id, **values})
    if added:
        session.execute(insert(model), added)
    if changed:
        session.execute(update(model), changed)
    if stored:
        session.execute(delete(model).where(model.id.in_([row.id for row in stored.values()])))
    return len(added), len(changed), len(stored)


def write_inventory(session: Session, cluster: Cluster, inventory: MemberInventory, now: datetime) -> WriteResult:
    """Make the stored nodes and HyperNodes of `cluster` equal `inventory`, writing only the differences."""
    result = WriteResult()
    devices = inventory.devices
    use = node_device_use(session, devices)
    nodes = {name: {**row, "device_use": use.get(name, {})} for name, row in inventory.nodes.items()}
    result.nodes_added, result.nodes_changed, result.nodes_removed = _write_rows(
        session, Node, cluster.id, nodes, _NODE_FIELDS)
    result.devices_changed = (sum(_write_rows(session, Device, cluster.id, devices.devices, _DEVICE_FIELDS))
                              + sum(_write_rows(session, DeviceClass, cluster.id, devices.classes, ("selectors",)))
                              + sum(_write_rows(session, CounterSet, cluster.id, devices.counter_sets,
                                                ("driver", "pool", "counters"))))
    result.hypernodes_changed, result.new_warnings = write_topology(session, cluster, inventory.topology,
                                                                    inventory.hypernode_source, devices.warnings)
    if result.nodes_added or result.nodes_changed or result.nodes_removed or result.devices_changed:
        session.execute(inventory_changed(cluster.id))
    if cluster.state == "Pending":
        cluster.state = cluster.cordon or "Ready"
        events.record(session, "cluster", cluster.name, "Synced",
                      f"first inventory: {len(inventory.nodes)} nodes, {len(inventory.topology.hypernodes)} "
                      f"HyperNodes ({inventory.hypernode_source})")
    cluster.synced_at = now
    return result


def write_topology(session: Session, cluster: Cluster, topology: Topology, source: str,
                   device_warnings: list[str] = ()) -> tuple[int, list[str]]:
    """Make the stored HyperNodes of `cluster` equal `topology` and record its source and warnings, the topology's and
    the devices' (an event for new ones); (HyperNode rows changed, new warnings)."""
    tree = {h.name: {"tier": h.tier, "parent": h.parent, "nodes": list(h.nodes)} for h in topology.hypernodes}
    changed = sum(_write_rows(session, HyperNode, cluster.id, tree, ("tier", "parent", "nodes")))
    if changed:
        session.execute(inventory_changed(cluster.id))
    warnings = [*topology.warnings, *device_warnings]
    new_warnings = [w for w in warnings if w not in (cluster.warnings or [])]
    if new_warnings:
        reason = "TopologyInvalid" if any(w in topology.warnings for w in new_warnings) else "DevicesInvalid"
        events.record(session, "cluster", cluster.name, reason, "; ".join(new_warnings), warning=True)
    if cluster.warnings != warnings:
        cluster.warnings = warnings
    if cluster.hypernode_source != source:
        cluster.hypernode_source = source
    return changed, new_warnings


def record_sync_error(session: Session, cluster: Cluster, error: str) -> None:
    """A failed sync: said once (an event when the error changes), kept in last_error."""
    if cluster.last_error != error:
        cluster.last_error = error
        events.record(session, "cluster", cluster.name, "SyncFailed", error, warning=True)


def record_probe(session: Session, cluster: Cluster, *, now: datetime, grace: float,
                 version: str | None = None, error: str | None = None) -> None:
    """One health probe's outcome (for a pull member: its agent's heartbeat, or its silence). A member is
    NotReady once it has not answered for `grace` seconds since its last heartbeat, and goes back to its admin
    state when it answers again."""
    if error is None:
        cluster.last_heartbeat = now
        if version and cluster.kubernetes_version != version:
            cluster.kubernetes_version = version
        if cluster.unreachable_since is not None:
            cluster.unreachable_since = None
            cluster.last_error = None
        if cluster.state == "NotReady":
            cluster.state = cluster.cordon or ("Ready" if cluster.synced_at else "Pending")
            events.record(session, "cluster", cluster.name, "MemberReady",
                          f"{cluster.api_server or 'its agent'} answers again")
        return
    if cluster.unreachable_since is None:
        cluster.unreachable_since = now
    if cluster.last_error != error:
        cluster.last_error = error
    # a pull member's agent has had the grace since registration to call in for the first time
    silent_since = as_utc(cluster.last_heartbeat or (cluster.created_at if cluster.mode == "pull"
                                                      else cluster.unreachable_since))
    if cluster.state != "NotReady" and (now - silent_since).total_seconds() >= grace:
        cluster.state = "NotReady"
        events.record(session, "cluster", cluster.name, "MemberNotReady",
                      f"no answer for {grace:g}s: {error}", warning=True)
