"""Scenario files: which clusters to simulate, their nodes, network topology and HyperNodes.

```yaml
defaults: {...}                  # any cluster key, applied to every cluster
clusters:
- name: eu-west                  # DNS-1123 label; the base path is /clusters/<name>
  labels: {region: eu, gpu: h100}  # cluster labels (for whoever registers the cluster)
  nodes: 32                      # or a list of explicit nodes, see below
  node: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "8"}   # allocatable of each node
  node_labels: {pool: gpu}       # extra labels on every node of this pool
  taints: [{key: k, value: v, effect: NoSchedule}]
  name_prefix: node              # node names <prefix>-00, <prefix>-01, ...
  zones: [eu-west-1a, eu-west-1b]  # one zone per spine, round robin (default <name>-a)
  topology: {leaf: 8, spine: 2}  # nodes per leaf switch, leaves per spine
  fabric: archipelago            # how the leaf and spine are labelled (labels mode): archipelago (our own
                                 # network.archipelago.io/leaf, /spine), aws (an EC2 UltraCluster's
                                 # topology.k8s.aws/network-node-layer-3/-2/-1), gke (a block / sub-block fleet's
                                 # cloud.google.com/gce-topology-subblock/-block), nvlink (an NVL72 rack per leaf:
                                 # nvidia.com/gpu.clique, no spine); a list combines them (aws + nvlink: an
                                 # UltraServer's clique under its layers)
  hypernodes: crd                # crd: HyperNode objects of its leaf/spine labels | empty: the HyperNode CRD
                                 # served, no objects (Volcano with no tree yet) | labels: neither | none: neither,
                                 # and no leaf/spine labels
  pools: [{name_prefix: cpu, nodes: 4, node: {...}, node_labels: {}, taints: [], topology: {...}, zones: []}]
  devices: {driver: gpu.example.com, count: 8, attributes: {productName: NVIDIA H100}, capacity: {memory: 80Gi}}
                                 # each node's devices, published as a ResourceSlice (resource.k8s.io/v1, one pool per
                                 # node) with a DeviceClass per driver; a pool key too
  # devices may also say `mig: [1g.10gb, 3g.40gb, 7g.80gb]` (each GPU partitionable: MIG_PROFILES) and `taints`
  device_classes: {h100.example.com: 'device.attributes["gpu.example.com"].productName == "NVIDIA H100"'}
                                 # DeviceClasses of its own beside one per driver and per MIG profile
  dra: true                      # whether it serves resource.k8s.io/v1 (default: when a pool has devices); false: a
                                 # member older than Kubernetes 1.34
  jobset: true                   # false: JobSet CRD not installed
  version: v1.31.4               # /version gitVersion and kubelet version
  duration: 60s                  # default simulated run time of a pod
  token: secret                  # the admin's bearer token (default: random); ServiceAccount tokens are
                                 # allowed what RBAC grants them (clusters/sim/rbac.py)
  access_reviews: true           # false: no SelfSubjectAccessReview API (404), as on some managed control planes
  watch_history: 2000            # events kept per resource for watches; older ones give 410 Gone
  jobset_refuses: []             # JobSet features its webhook refuses (feature gates off): RestartJob,
                                 # InPlaceRestart, VolumeClaimPolicies (clusters/sim/webhooks.py)
  pod_termination: 0s            # how long a deleted running pod stays Terminating (its grace period) before
                                 # its kubelet lets it go; a foreground deletion waits for it
  controller_lag: 0s             # a busy control plane: a new JobSet gets its Jobs, and a new Job its pods,
                                 # only this long (simulated) after it appeared
  unpullable_images: []          # image patterns (fnmatch, e.g. "*.invalid/*") whose pods are bound to a node
                                 # but stay Pending in ImagePullBackOff, holding the node's resources
  jobset_counts: current         # current | omitted (a JobSet controller that writes no per-ReplicatedJob
                                 # counts) | lagging (a new condition goes out with the previous counts,
                                 # the counts follow one simulated second later)
```
Explicit nodes: `nodes: [{name, resources, labels, taints, zone, leaf, spine, unschedulable}]`;
a missing `leaf`/`spine`/`zone` is derived from the node's position as for generated nodes.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clusters.sim.webhooks import FEATURES

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
LEAF = "network.archipelago.io/leaf"
SPINE = "network.archipelago.io/spine"
AWS_LAYER = "topology.k8s.aws/network-node-layer-"
GKE_BLOCK, GKE_SUBBLOCK = "cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock"
CLIQUE = "nvidia.com/gpu.clique"
_MODES = ("crd", "empty", "labels", "none")
JOBSET_COUNTS = ("current", "omitted", "lagging")
_KEYS = {"name", "labels", "nodes", "node", "node_labels", "taints", "name_prefix", "zones", "topology",
         "hypernodes", "pools", "jobset", "version", "duration", "token", "watch_history", "jobset_counts",
         "controller_lag", "unpullable_images", "access_reviews", "aliases", "pod_termination",
         "jobset_refuses", "fabric", "devices", "dra", "device_classes"}
_POOL_KEYS = {"nodes", "node", "node_labels", "taints", "name_prefix", "zones", "topology", "fabric", "devices"}
FABRICS = ("archipelago", "aws", "gke", "nvlink")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass
class ClusterSpec:
    name: str
    labels: dict[str, str]
    nodes: list[dict]
    hypernodes: list[dict]
    hypernode_mode: str = "crd"
    jobset: bool = True
    version: str = "v1.31.4"
    duration: float = 60.0
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    watch_history: int = 2000
    jobset_counts: str = "current"
    controller_lag: float = 0.0
    pod_termination: float = 0.0
    jobset_refuses: tuple[str, ...] = ()
    unpullable_images: tuple[str, ...] = ()
    access_reviews: bool = True
    aliases: tuple[str, ...] = ()  # more names it is served under (/clusters/<alias>), as a second address would
    dra: bool = False  # serves resource.k8s.io/v1
    device_classes: list[dict] = field(default_factory=list)
    resource_slices: list[dict] = field(default_factory=list)


def load(source: dict | str | Path) -> list[ClusterSpec]:
    """A scenario from a dict, a YAML text or a YAML file."""
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and source.endswith((".yaml", ".yml"))):
        source = Path(source).read_text()
    data = yaml.safe_load(source) if isinstance(source, str) else source
    if not isinstance(data, dict) or not isinstance(data.get("clusters"), list) or not data["clusters"]:
        raise ValueError("a scenario needs a non-empty 'clusters' list")
    defaults = data.get("defaults") or {}
    specs, seen = [], set()
    for entry in data["clusters"]:
        spec = build_cluster({**defaults, **entry})
        for name in (spec.name, *spec.aliases):
            if name in seen:
                raise ValueError(f"cluster name {name!r} is used twice")
            seen.add(name)
        specs.append(spec)
    return specs


def build_cluster(entry: dict[str, Any]) -> ClusterSpec:
    from clusters.rules.durations import parse_duration

    name = str(entry.get("name", ""))
    if not _LABEL.match(name):
        raise ValueError(f"cluster name {name!r} must be a DNS-1123 label")
    unknown = set(entry) - _KEYS
    if unknown:
        raise ValueError(f"cluster {name}: unknown keys {sorted(unknown)}")
    mode = entry.get("hypernodes", "crd")
    if mode not in _MODES:
        raise ValueError(f"cluster {name}: hypernodes must be one of {_MODES}")
    if entry.get("jobset_counts", "current") not in JOBSET_COUNTS:
        raise ValueError(f"cluster {name}: jobset_counts must be one of {JOBSET_COUNTS}")
    labels = {str(k): str(v) for k, v in (entry.get("labels") or {}).items()}
    version = str(entry.get("version", "v1.31.4"))
    builder = _NodeBuilder(name, labels, mode != "none", version)
    builder.pool(entry)
    for pool in entry.get("pools") or ():
        unknown = set(pool) - _POOL_KEYS
        if unknown:
            raise ValueError(f"cluster {name}: unknown pool keys {sorted(unknown)}")
        builder.pool({**{k: v for k, v in entry.items() if k in ("zones", "topology", "fabric")}, **pool})
    nodes = builder.nodes
    dra = bool(entry.get("dra", bool(builder.slices)))
    if builder.slices and not dra:
        raise ValueError(f"cluster {name}: devices need dra (resource.k8s.io/v1)")
    if len({n["metadata"]["name"] for n in nodes}) != len(nodes):
        raise ValueError(f"cluster {name}: node names are not unique")
    spec = ClusterSpec(name=name, labels=labels, nodes=nodes,
                       hypernodes=hypernode_tree(nodes) if mode == "crd" else [], hypernode_mode=mode,
                       jobset=bool(entry.get("jobset", True)), version=version,
                       duration=parse_duration(entry.get("duration", 60)),
                       watch_history=int(entry.get("watch_history", 2000)),
                       jobset_counts=entry.get("jobset_counts", "current"),
                       controller_lag=parse_duration(entry.get("controller_lag", 0)),
                       pod_termination=parse_duration(entry.get("pod_termination", 0)),
                       jobset_refuses=tuple(str(f) for f in entry.get("jobset_refuses") or ()),
                       unpullable_images=tuple(str(i) for i in entry.get("unpullable_images") or ()),
                       access_reviews=bool(entry.get("access_reviews", True)),
                       aliases=tuple(str(a) for a in entry.get("aliases") or ()), dra=dra,
                       device_classes=device_classes(builder.slices, entry.get("device_classes")),
                       resource_slices=builder.slices)
    for alias in spec.aliases:
        if not _LABEL.match(alias):
            raise ValueError(f"cluster {name}: alias {alias!r} must be a DNS-1123 label")
    unknown_features = set(spec.jobset_refuses) - set(FEATURES)
    if unknown_features:
        raise ValueError(f"cluster {name}: jobset_refuses names unknown features {sorted(unknown_features)}; "
                         f"known: {list(FEATURES)}")
    if entry.get("token"):
        spec.token = str(entry["token"])
    return spec


class _NodeBuilder:
    """Builds node objects; identical sub-objects are shared between the nodes of a pool."""

    def __init__(self, cluster: str, cluster_labels: dict[str, str], topology: bool, version: str) -> None:
        self.cluster, self.region = cluster, cluster_labels.get("region")
        self.topology, self.version = topology, version
        self.nodes: list[dict] = []
        self.slices: list[dict] = []  # each node's devices, one ResourceSlice a node
        self.leaf_base = self.spine_base = 0

    def pool(self, pool: dict) -> None:
        count_or_list = pool.get("nodes", 0)
        explicit = count_or_list if isinstance(count_or_list, list) else None
        count = len(explicit) if explicit is not None else int(count_or_list or 0)
        if count <= 0:
            return
        topo = pool.get("topology") or {}
        per_leaf, per_spine = int(topo.get("leaf", 8)), int(topo.get("spine", 2))
        if per_leaf <= 0 or per_spine <= 0:
            raise ValueError(f"cluster {self.cluster}: topology sizes must be positive")
        zones = [str(z) for z in pool.get("zones") or [f"{self.cluster}-a"]]
        fabrics = pool.get("fabric") or "archipelago"
        fabrics = [fabrics] if isinstance(fabrics, str) else list(fabrics)
        if not set(fabrics) <= set(FABRICS):
            raise ValueError(f"cluster {self.cluster}: fabric must be one or more of {FABRICS}, not {fabrics}")
        prefix = pool.get("name_prefix", "node")
        width = max(2, len(str(len(self.nodes) + count - 1)))
        resources = {str(k): str(v) for k, v in (pool.get("node") or {"cpu": "8", "memory": "32Gi"}).items()}
        shared_status = _shared_status(resources, self.version)
        pool_labels = {str(k): str(v) for k, v in (pool.get("node_labels") or {}).items()}
        taints = list(pool.get("taints") or [])
        for i in range(count):
            item = explicit[i] if explicit is not None else {}
            leaf_index = self.leaf_base + i // per_leaf
            spine_index = self.spine_base + (i // per_leaf) // per_spine
            name = item.get("name") or f"{prefix}-{len(self.nodes):0{width}d}"
            labels = {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", HOSTNAME: name,
                      ZONE: str(item.get("zone") or zones[(spine_index - self.spine_base) % len(zones)])}
            if self.region:
                labels[REGION] = self.region
            if self.topology:
                leaf = str(item.get("leaf") or f"leaf-{leaf_index}")
                spine = str(item.get("spine") or f"spine-{spine_index}")
                for fabric in fabrics:
                    labels.update(self._fabric_labels(fabric, leaf, spine, labels[ZONE]))
            labels.update(pool_labels)
            labels.update({str(k): str(v) for k, v in (item.get("labels") or {}).items()})
            status = shared_status
            if item.get("resources"):
                status = _shared_status({str(k): str(v) for k, v in item["resources"].items()}, self.version)
            ip = f"10.{len(self.nodes) >> 16 & 255}.{len(self.nodes) >> 8 & 255}.{len(self.nodes) & 255}"
            spec: dict = {"podCIDR": f"10.244.{len(self.nodes) % 256}.0/24"}
            node_taints = list(item.get("taints") or taints)
            if node_taints:
                spec["taints"] = node_taints
            if item.get("unschedulable"):
                spec["unschedulable"] = True
            if pool.get("devices"):
                self.slices.append(resource_slice(name, pool["devices"]))
            self.nodes.append({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": spec,
                "status": {**status, "addresses": [{"type": "InternalIP", "address": ip},
                                                   {"type": "Hostname", "address": name}]},
            })
        leaves = (count + per_leaf - 1) // per_leaf
        self.leaf_base += leaves
        self.spine_base += (leaves + per_spine - 1) // per_spine


    def _fabric_labels(self, fabric: str, leaf: str, spine: str, zone: str) -> dict[str, str]:
        """A leaf and a spine as each fabric's labels spell them: values as the cloud or the operator writes them
        (AWS's top layer is one network node per zone)."""
        if fabric == "aws":
            return {f"{AWS_LAYER}3": _network_node(self.cluster, leaf),
                    f"{AWS_LAYER}2": _network_node(self.cluster, spine),
                    f"{AWS_LAYER}1": _network_node(self.cluster, zone)}
        if fabric == "gke":
            return {GKE_SUBBLOCK: _network_node(self.cluster, leaf)[3:],
                    GKE_BLOCK: _network_node(self.cluster, spine)[3:]}
        if fabric == "nvlink":  # the fabric manager's <cluster UUID>.<clique id>
            return {CLIQUE: f"{_uuid(self.cluster)}.{leaf.rpartition('-')[2]}"}
        return {LEAF: leaf, SPINE: spine}


# The simulator's MIG profiles: (compute slices, memory slices) of a GPU's 7 and 8, and how many of each a GPU offers
MIG_PROFILES = {"1g.10gb": (1, 1, 7), "2g.20gb": (2, 2, 3), "3g.40gb": (3, 3, 2), "7g.80gb": (7, 8, 1)}


def resource_slice(node: str, devices: dict) -> dict:
    """One node's devices as its DRA driver publishes them: one pool per node, named after it, in one slice. With
    `mig` (profile names), each GPU is partitionable: a counter set of its 7 compute and 8 memory slices, and a device
    per place a profile can take, each consuming its slices (as NVIDIA's driver publishes partitionable devices)."""
    driver = str(devices.get("driver", "gpu.example.com"))
    attributes = {str(k): _attribute(v) for k, v in (devices.get("attributes") or {}).items()}
    capacity = {str(k): {"value": str(v)} for k, v in (devices.get("capacity") or {}).items()}
    taints = [dict(t) for t in devices.get("taints") or ()]
    extra = {**({"capacity": capacity} if capacity else {}), **({"taints": taints} if taints else {})}
    count, profiles = int(devices.get("count", 1)), [str(p) for p in devices.get("mig") or ()]
    unknown = set(profiles) - set(MIG_PROFILES)
    if unknown:
        raise ValueError(f"unknown MIG profiles {sorted(unknown)}: use {', '.join(MIG_PROFILES)}")
    counters, items = [], []
    for i in range(count):
        if not profiles:
            items.append({"name": f"gpu-{i}", **({"attributes": attributes} if attributes else {}), **extra})
            continue
        counters.append({"name": f"gpu-{i}-slices", "counters": {"compute": {"value": "7"}, "memory": {"value": "8"}}})
        for profile in profiles:
            compute, memory, places = MIG_PROFILES[profile]
            for place in range(places):
                items.append({"name": f"gpu-{i}-mig-{profile.replace('.', '-')}-{place}",
                              "attributes": {**attributes, "profile": {"string": profile}, "parent": {"string": f"gpu-{i}"}},
                              "consumesCounters": [{"counterSet": f"gpu-{i}-slices", "counters": {
                                  "compute": {"value": str(compute)}, "memory": {"value": str(memory)}}}], **extra})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver.replace('.', '-')}"},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                  "resourceSliceCount": 1},
                     **({"sharedCounters": counters} if counters else {}), "devices": items}}


def device_classes(slices: list[dict], extra: dict | None = None) -> list[dict]:
    """A DeviceClass per driver, selecting its devices (as the drivers' Helm charts install them), one per MIG profile
    published (`mig-<profile>.<driver>`), and the scenario's own (`device_classes`: name -> CEL expression)."""
    classes = {}
    for s in slices:
        driver = s["spec"]["driver"]
        classes.setdefault(driver, f'device.driver == "{driver}"')
        for device in s["spec"]["devices"]:
            profile = device.get("attributes", {}).get("profile", {}).get("string")
            if profile:  # the driver's class is for whole GPUs (NVIDIA's gpu.nvidia.com), not their partitions
                classes[driver] = (f'device.driver == "{driver}" && !("{driver}" in device.attributes && '
                                   f'"profile" in device.attributes["{driver}"])')
                classes[f"mig-{profile}.{driver}"] = (f'device.driver == "{driver}" && '
                                                      f'device.attributes["{driver}"].profile == "{profile}"')
    classes.update({str(k): str(v) for k, v in (extra or {}).items()})
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
             "spec": {"selectors": [{"cel": {"expression": expression}}]}} for name, expression in sorted(classes.items())]


def _attribute(value) -> dict:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": str(value)}


def _network_node(cluster: str, domain: str) -> str:
    """An id in AWS's shape (nn-<17 hex>), the same for one domain of one cluster."""
    return "nn-" + hashlib.sha256(f"{cluster}/{domain}".encode()).hexdigest()[:17]


def _uuid(cluster: str) -> str:
    digest = hashlib.sha256(cluster.encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _shared_status(resources: dict[str, str], version: str) -> dict:
    capacity = {"pods": "110", "ephemeral-storage": "500Gi", **resources}
    conditions = [
        {"type": t, "status": "False", "reason": f"KubeletHasSufficient{t[:-8] if t.endswith('Pressure') else t}",
         "message": f"kubelet has no {t}", "lastHeartbeatTime": None, "lastTransitionTime": None}
        for t in ("MemoryPressure", "DiskPressure", "PIDPressure")]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                       "message": "kubelet is posting ready status", "lastHeartbeatTime": None,
                       "lastTransitionTime": None})
    return {"capacity": capacity, "allocatable": capacity, "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "sim://1.0",
                         "kernelVersion": "6.1.0", "kubeProxyVersion": version, "kubeletVersion": version,
                         "machineID": "", "operatingSystem": "linux", "osImage": "Archipelago simulated node",
                         "systemUUID": ""}}


def hypernode_tree(nodes: list[dict]) -> list[dict]:
    """Tier-1 HyperNode per leaf label, tier 2 per spine, tier 3 over all spines. Leaf members use,
    in turn, exact names, a regex over names and a label selector, so clients meet all three."""
    leaves: dict[str, list[str]] = {}
    spine_of: dict[str, str] = {}
    for node in nodes:
        labels = node["metadata"]["labels"]
        if LEAF in labels and SPINE in labels:
            leaves.setdefault(labels[LEAF], []).append(node["metadata"]["name"])
            spine_of.setdefault(labels[LEAF], labels[SPINE])
    if not leaves:
        return []
    result = []
    spines: dict[str, list[str]] = {}
    for i, (leaf, members) in enumerate(leaves.items()):
        if i % 3 == 0:
            selectors = [{"exactMatch": {"name": n}} for n in members]
        elif i % 3 == 1:
            selectors = [{"regexMatch": {"pattern": "^(" + "|".join(re.escape(n) for n in members) + ")$"}}]
        else:
            selectors = [{"labelMatch": {"matchLabels": {LEAF: leaf}}}]
        result.append(_hypernode(leaf, 1, "leaf", "Node", selectors, len(members)))
        spines.setdefault(spine_of[leaf], []).append(leaf)
    for spine, members in spines.items():
        count = sum(len(leaves[leaf]) for leaf in members)
        result.append(_hypernode(spine, 2, "spine", "HyperNode", [{"exactMatch": {"name": m}} for m in members], count))
    pattern = "^(" + "|".join(re.escape(s) for s in spines) + ")$"
    total = sum(len(m) for m in leaves.values())
    result.append(_hypernode("root", 3, "root", "HyperNode", [{"regexMatch": {"pattern": pattern}}], total))
    return result


def _hypernode(name: str, tier: int, tier_name: str, member_type: str, selectors: list[dict], count: int) -> dict:
    return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": name},
            "spec": {"tier": tier, "tierName": tier_name,
                     "members": [{"type": member_type, "selector": s} for s in selectors]},
            "status": {"nodeCount": count}}
