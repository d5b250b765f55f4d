"""A member's objects as the inventory needs them (`MemberMirror`), kept by relists and watch events: its nodes, the
pods' holds, its HyperNodes where it serves them, and where it serves Dynamic Resource Allocation
(`resource.k8s.io/v1`) its ResourceSlices, DeviceClasses and ResourceClaims. A pull member's agent reports the same
lists (`member_objects`, `reported_mirror`)."""

from __future__ import annotations

import threading
from typing import Any

from broker.store.inventory import Discovery, PodHold, member_inventory, node_row, pod_usage, resolve_topology
from clusters.rules.devices import DeviceInventory, device_inventory
from clusters.member import (ACTIVE_PODS, DEVICECLASSES, DRA_GROUP, DRA_VERSION, HYPERNODE_GROUP, HYPERNODE_VERSION,
                             HYPERNODES, NODES, PODS, RESOURCECLAIMS, RESOURCESLICES, MemberClient, MemberError)
from clusters.topology import Topology

DRA_KINDS = ("resourceslices", "deviceclasses", "resourceclaims")
# kind -> (resource, field selector)
_LISTS = {"nodes": (NODES, None), "pods": (PODS, ACTIVE_PODS), "hypernodes": (HYPERNODES, None),
          "resourceslices": (RESOURCESLICES, None), "deviceclasses": (DEVICECLASSES, None),
          "resourceclaims": (RESOURCECLAIMS, None)}


class MemberMirror:
    """A member's objects as the inventory needs them, kept by relists and watch events."""

    KINDS = ("nodes", "pods", "hypernodes", *DRA_KINDS)

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.nodes: dict[str, dict[str, Any]] = {}  # name -> node_row
        self.pods: dict[str, PodHold] = {}  # namespace/name -> what it holds
        self.hypernodes: dict[str, dict] = {}  # name -> object
        self.dra: dict[str, dict[str, dict]] = {kind: {} for kind in DRA_KINDS}  # kind -> namespace/name -> object
        self.has_hypernodes = False  # whether the member serves HyperNodes
        self.has_dra = False  # whether it serves resource.k8s.io/v1 (Kubernetes 1.34 and later), and may be read there
        self.dra_refused: str | None = None  # it serves DRA, but the broker's identity may not list it: why
        self.listed: dict[str, int] = {}  # kind -> resourceVersion of its last list
        self.resume: dict[str, str] = {}  # kind -> resourceVersion to watch from
        self.tree: tuple[Topology, str] | None = None  # the resolved HyperNode tree and its source, while it holds
        self._discovery: Discovery | None = None  # what `tree` was found by
        self._devices: DeviceInventory | None = None
        self.write_back = False  # the cluster's topology_write_back, as its last write read it

    def serves(self, kind: str) -> bool:
        return (kind != "hypernodes" or self.has_hypernodes) and (kind not in DRA_KINDS or self.has_dra)

    def replace(self, kind: str, items: list[dict], resource_version: str) -> None:
        with self.lock:
            if kind == "nodes":
                self.nodes = {n["metadata"]["name"]: node_row(n) for n in items}
            elif kind == "pods":
                self.pods = {}
                for pod in items:
                    self._put_pod(pod)
            elif kind == "hypernodes":
                self.hypernodes = {h["metadata"]["name"]: h for h in items}
            else:
                self.dra[kind] = {_key(o["metadata"]): o for o in items}
                self._devices = None
            if kind in ("nodes", "hypernodes"):
                self.tree = None
            self.listed[kind] = _int(resource_version)
            self.resume[kind] = resource_version

    def _put_pod(self, pod: dict) -> bool:
        key = f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"
        held = pod_usage(pod)
        if held is None:
            return self.pods.pop(key, None) is not None
        if self.pods.get(key) == held:
            return False
        self.pods[key] = held
        return True

    def apply(self, kind: str, event: dict) -> bool:
        """Apply one watch event; whether the inventory it derives changed."""
        obj = event.get("object") or {}
        metadata = obj.get("metadata") or {}
        version = metadata.get("resourceVersion") or ""
        with self.lock:
            self.resume[kind] = version or self.resume.get(kind, "")
            if event.get("type") == "BOOKMARK" or _int(version) <= self.listed.get(kind, -1):
                return False  # a bookmark, or older than the list already applied
            deleted = event.get("type") == "DELETED"
            name = metadata.get("name")
            if kind == "pods":
                if deleted:
                    return self.pods.pop(f"{metadata.get('namespace')}/{name}", None) is not None
                return self._put_pod(obj)
            if kind == "nodes":
                row = None if deleted else node_row(obj)
                old = self.nodes.pop(name, None) if deleted else self.nodes.get(name)
                if not deleted:
                    self.nodes[name] = row
                if old == row:
                    return False
                if old is None or row is None or old["labels"] != row["labels"]:
                    self.tree = None
                return True
            objects = self.hypernodes if kind == "hypernodes" else self.dra[kind]
            key = name if kind == "hypernodes" else _key(metadata)
            if deleted:
                objects.pop(key, None)
            else:
                objects[key] = obj
            if kind == "hypernodes":
                self.tree = None
            else:
                self._devices = None
            return True

    def inventory(self, discovery: Discovery):
        """The rows to write: nodes with their used resources, the resolved HyperNode tree (found again when the
        nodes' labels, the HyperNodes or how the cluster's tree is to be found changed), and the devices."""
        with self.lock:
            if self.tree is None or self._discovery != discovery:
                labels = {name: row["labels"] for name, row in self.nodes.items()}
                self.tree = resolve_topology(labels, self.hypernodes.values() if self.has_hypernodes else None,
                                                  discovery)
                self._discovery = discovery
            if self._devices is None:
                self._devices = device_inventory(self.dra["resourceslices"].values(),
                                                 self.dra["resourceclaims"].values(),
                                                 self.dra["deviceclasses"].values()) if self.has_dra else \
                    DeviceInventory(warnings=[f"devices not read: {self.dra_refused}"] if self.dra_refused else [])
            return member_inventory(self.nodes, list(self.pods.values()), *self.tree, devices=self._devices)


def _key(metadata: dict) -> str:
    return f"{metadata.get('namespace') or ''}/{metadata['name']}"


def _int(version: str) -> int:
    """resourceVersions are opaque by contract, integers (etcd revisions) in practice."""
    try:
        return int(version)
    except ValueError:
        return -1


def relist(client: MemberClient, mirror: MemberMirror, kind: str) -> None:
    """From the API server's watch cache (resourceVersion=0), not etcd: the watch that follows from
    the list's resourceVersion brings whatever the cache had not seen yet."""
    resource, field_selector = _LISTS[kind]
    items, version = client.list(resource, field_selector=field_selector, from_cache=True)
    mirror.replace(kind, items, version)


def served(client: MemberClient) -> tuple[bool, bool]:
    """Whether the member serves HyperNodes (Volcano's CRD), and DRA (Kubernetes 1.34 or later): one discovery
    request for both."""
    versions = client.group_versions()
    return f"{HYPERNODE_GROUP}/{HYPERNODE_VERSION}" in versions, f"{DRA_GROUP}/{DRA_VERSION}" in versions


def member_objects(client: MemberClient) -> dict[str, list[dict] | None]:
    """Every object of each kind the inventory reads, as a pull member's agent reports them (None where the member
    serves none of a kind), from the API server's watch cache."""
    mirror = MemberMirror()
    mirror.has_hypernodes, mirror.has_dra = served(client)
    return {kind: client.list(resource, field_selector=field_selector, from_cache=True)[0]
            if mirror.serves(kind) else None
            for kind, (resource, field_selector) in _LISTS.items()}


def reported_mirror(objects: dict[str, list[dict] | None]) -> MemberMirror:
    """A mirror of what an agent reported, to write with the same rows as a sync's."""
    mirror = MemberMirror()
    mirror.has_hypernodes = objects.get("hypernodes") is not None
    mirror.has_dra = objects.get("resourceslices") is not None
    for kind in MemberMirror.KINDS:
        if objects.get(kind) is not None:
            mirror.replace(kind, objects[kind], "0")
    return mirror


def relist_all(client: MemberClient, mirror: MemberMirror) -> None:
    """List every kind the member serves into the mirror. A member registered before the broker read devices may not
    let it list them: its devices are then not read, and its cluster says why (the rest syncs as before)."""
    mirror.has_hypernodes, mirror.has_dra = served(client)
    mirror.dra_refused = None
    for kind in MemberMirror.KINDS:
        if not mirror.serves(kind):
            continue
        try:
            relist(client, mirror, kind)
        except MemberError as exc:
            if kind not in DRA_KINDS or exc.reason != "Forbidden":
                raise
            mirror.has_dra, mirror._devices = False, None
            mirror.dra_refused = (f"the broker's identity may not list {kind}.{DRA_GROUP} ({exc}); grant it the "
                                  "ClusterRole of deploy/member-rbac.yaml again")
