"""Parse a JobSet manifest (jobset.x-k8s.io/v1alpha2) into the pure `JobSpec` the placement engine reads.

The REST API calls `parse_jobset` to validate submissions, so every error names the field
(`spec.replicatedJobs[1].replicas`) and says what to do about it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

from clusters.rules.labels import (NodeSelectorTerm, Requirement, Selector, TermError, check_annotations, check_labels,
                                   is_dns_label, node_selector_term, parse_selector)
from clusters.rules.pods import PodSpecError, as_list, as_mapping, check_resource_requirements, effective_requests
from clusters.rules.taints import toleration_error

API_VERSION = "jobset.x-k8s.io/v1alpha2"
KIND = "JobSet"

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
PLACEMENT_ANNOTATION = "archipelago.io/placement"
CLUSTER_SELECTOR_ANNOTATION = "archipelago.io/cluster-selector"
TOPOLOGY_MODE_ANNOTATION = "archipelago.io/network-topology-mode"
HIGHEST_TIER_ANNOTATION = "archipelago.io/highest-tier-allowed"
# How often the broker may restart failed parts of a split job (default: failurePolicy.maxRestarts).
MAX_RESTARTS_ANNOTATION = "archipelago.io/max-restarts"
EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"
# How long its pods may take to be ready on a member before the placement is evicted ("10m", "90s").
STARTUP_TIMEOUT_ANNOTATION = "archipelago.io/startup-timeout"
# What becomes of the job when the scheduler preempts it: back in its queue (default), or failed.
ON_PREEMPTION_ANNOTATION = "archipelago.io/on-preemption"
EXPECTED_RUNTIME_ANNOTATION = "archipelago.io/expected-runtime"  # a duration: broker.engine.forecast.runtime
ON_PREEMPTION = ("requeue", "fail")
_DURATION = re.compile(r"([1-9]\d{0,6})(s|m|h)?")

PLACEMENT_MODES = ("whole", "split")
TOPOLOGY_MODES = ("hard", "soft")
# Volcano's default when a hard network topology names no tier: the pods share one leaf.
DEFAULT_HIGHEST_TIER = 1

_POD_PATH = "template.spec.template.spec"
_REQUIRED_AFFINITY = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
POD_SLOT = "pods"  # a node's allocatable `pods`: every pod takes one, as the kube-scheduler counts


class JobSetError(ValueError):
    """A manifest that cannot be accepted: `path` names the field, `message` says how to fix it."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def _frozen(mapping: Mapping | None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True)
class PartSpec:
    """One ReplicatedJob: `replicas` Jobs, each running `parallelism` pods of the same shape at once."""

    name: str
    replicas: int
    parallelism: int
    completions: int | None
    # effective per-pod request in milli-units, overhead included, and its pod slot (`pods`: 1000)
    pod_requests: Mapping[str, int]
    tolerations: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    exclusive_topology: str | None = None  # node label whose values each child Job must own
    # the pod's required node affinity: a node must match one term; None when it has none
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    # may its pods use control-plane nodes? Only a privileged tenant's may (`on_control_planes`).
    control_plane: bool = False
    devices: str | None = None  # its pods' DRA device requests in words, when they have claims (broker.engine.claims)
    # the whole part's demand: `replicas × parallelism` pods of `pod_requests` (computed once: the scheduler
    # asks for it several times per pending job and cycle)
    requests: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "requests", MappingProxyType({r: q * self.pods for r, q in self.pod_requests.items()}))

    def may_run_on(self, name: str, labels: Mapping[str, str]) -> bool:
        """Do the node selector and the required node affinity let a pod of this part onto that node?"""
        return (all(labels.get(k) == v for k, v in self.node_selector.items())
                and (self.node_affinity is None or any(t.matches(name, labels) for t in self.node_affinity)))

    @property
    def pods(self) -> int:
        return self.replicas * self.parallelism



@dataclass(frozen=True, slots=True)
class PlacementSpec:
    """What the placement engine reads of a JobSet: where it may run and what it needs there. The scheduler
    rebuilds it for each pending job from the job's `placement_record`, not from its manifest."""

    placement: str  # "whole" | "split"
    cluster_selector: Selector
    topology_mode: str | None  # "hard" | "soft" | None (treated as soft)
    highest_tier_allowed: int | None  # only meaningful with "hard"
    parts: tuple[PartSpec, ...]
    requests: Mapping[str, int] = field(init=False, repr=False, compare=False)  # all parts' demand, summed

    def __post_init__(self) -> None:
        total: dict[str, int] = {}
        for part in self.parts:
            for resource, amount in part.requests.items():
                total[resource] = total.get(resource, 0) + amount
        object.__setattr__(self, "requests", MappingProxyType(total))

    @property
    def pods(self) -> int:
        return sum(p.pods for p in self.parts)

    @property
    def tier_bound(self) -> int | None:
        """The highest HyperNode tier a placement may use, or None when any layout will do."""
        return self.highest_tier_allowed if self.topology_mode == "hard" else None


@dataclass(frozen=True, slots=True)
class JobSpec(PlacementSpec):
    """A parsed JobSet: its placement spec, and who it is and where it queues."""

    name: str
    namespace: str | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    queue: str | None
    priority_class: str | None
    max_restarts: int = 0


# `placement_record`'s format: a record of another version is not read (the manifest is parsed instead), so a change
# to what `PlacementSpec` holds or means bumps it. 3: a part's `devices`. (The manifest alone does not say a job's
# device demands — its claim templates do, `broker.engine.claims`: the next bump must read them too.)
PLACEMENT_RECORD_VERSION = 3


def on_control_planes(spec: JobSpec) -> JobSpec:
    """The spec of a privileged tenant's JobSet: its pods may also use control-plane nodes."""
    return replace(spec, parts=tuple(replace(part, control_plane=True) for part in spec.parts))


def placement_record(spec: PlacementSpec) -> str:
    """The placement spec as compact JSON, stored with the job when it is submitted: a new leader's scheduler reads
    100,000 of these rather than parsing as many manifests, and the jobs of one template share one text (one
    `from_placement_record` each). Mappings keep their order, so the rebuilt spec has the parsed one's shape."""
    return json.dumps({
        "v": PLACEMENT_RECORD_VERSION, "placement": spec.placement,
        "clusterSelector": _requirements(spec.cluster_selector), "topologyMode": spec.topology_mode,
        "highestTierAllowed": spec.highest_tier_allowed,
        "parts": [{"name": p.name, "replicas": p.replicas, "parallelism": p.parallelism, "completions": p.completions,
                   "podRequests": dict(p.pod_requests), "tolerations": [dict(t) for t in p.tolerations],
                   "nodeSelector": dict(p.node_selector), "exclusiveTopology": p.exclusive_topology,
                   "controlPlane": p.control_plane, "devices": p.devices, "nodeAffinity": None if p.node_affinity is None else [
                       [_requirements(term.expressions), _requirements(term.fields)] for term in p.node_affinity]}
                  for p in spec.parts]}, separators=(",", ":"))


def from_placement_record(text: str) -> PlacementSpec:
    """The spec `placement_record` stored; ValueError for a record of another version or none at all (the caller
    parses the manifest instead)."""
    record = json.loads(text)
    if not isinstance(record, dict) or record.get("v") != PLACEMENT_RECORD_VERSION:
        raise ValueError(f"not a version {PLACEMENT_RECORD_VERSION} placement record")
    parts = tuple(PartSpec(
        name=p["name"], replicas=p["replicas"], parallelism=p["parallelism"], completions=p["completions"],
        pod_requests=MappingProxyType(p["podRequests"]), tolerations=tuple(map(MappingProxyType, p["tolerations"])),
        node_selector=MappingProxyType(p["nodeSelector"]), exclusive_topology=p["exclusiveTopology"],
        control_plane=p["controlPlane"], devices=p.get("devices"), node_affinity=None if p["nodeAffinity"] is None else tuple(
            NodeSelectorTerm(_selector(expressions), _selector(fields)) for expressions, fields in p["nodeAffinity"]))
        for p in record["parts"])
    return PlacementSpec(placement=record["placement"], cluster_selector=_selector(record["clusterSelector"]),
                         topology_mode=record["topologyMode"], highest_tier_allowed=record["highestTierAllowed"],
                         parts=parts)


def _requirements(selector: Selector) -> list[list]:
    return [[r.key, r.operator, list(r.values)] for r in selector.requirements]


def _selector(requirements: list[list]) -> Selector:
    return Selector(tuple(Requirement(key, operator, tuple(values)) for key, operator, values in requirements))


def _mapping(value: Any, path: str) -> Mapping:
    return as_mapping(value, path, JobSetError)


def _list(value: Any, path: str) -> list:
    return as_list(value, path, JobSetError)


def _dns_label(value: Any, path: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise JobSetError(path, f"{what} is required")
    if not is_dns_label(value):
        raise JobSetError(path, f"{what} {value!r} must be a DNS-1123 label: at most 63 lowercase "
                                "letters, digits or '-', starting and ending with a letter or digit")
    return value


def _positive_int(value: Any, path: str, default: int | None) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobSetError(path, f"must be a whole number, got {value!r:.60}")
    if value < 1:
        raise JobSetError(path, f"must be at least 1, got {value}")
    if value > 2**31 - 1:
        raise JobSetError(path, f"must be at most 2147483647 (Kubernetes counts in int32), got {value}")
    return value


def _string_map(value: Any, path: str) -> dict[str, str]:
    mapping = _mapping(value, path)
    for key, item in mapping.items():
        if not isinstance(item, str):
            raise JobSetError(f"{path}[{key!r}]", f"must be a string (quote it in YAML), got {item!r:.60}")
    return dict(mapping)


def _labels(value: Any, path: str) -> dict[str, str]:
    """Labels (or a node selector) as kube-apiserver checks them, naming the first bad key."""
    labels = _string_map(value, path)
    for key, item in labels.items():
        try:
            check_labels({key: item})
        except ValueError as exc:
            raise JobSetError(f"{path}[{key!r}]", str(exc)) from None
    return labels


def _annotations(value: Any, path: str) -> dict[str, str]:
    annotations = _string_map(value, path)
    try:
        check_annotations(annotations)
    except ValueError as exc:
        raise JobSetError(path, str(exc)) from None
    return annotations


def _metadata(template: Mapping, path: str) -> tuple[dict[str, str], dict[str, str]]:
    """A template's labels and annotations, checked."""
    meta = _mapping(template.get("metadata"), f"{path}.metadata")
    return _labels(meta.get("labels"), f"{path}.metadata.labels"), _annotations(meta.get("annotations"),
                                                                                f"{path}.metadata.annotations")


def _container_names(pod_spec: Mapping, path: str) -> None:
    seen: set[str] = set()
    for field_name in ("initContainers", "containers"):
        for i, container in enumerate(_list(pod_spec.get(field_name), f"{path}.{field_name}")):
            where = f"{path}.{field_name}[{i}].name"
            name = _dns_label(_mapping(container, f"{path}.{field_name}[{i}]").get("name"), where, "the container name")
            if name in seen:
                raise JobSetError(where, f"{name!r} is used twice; container names must be unique in a pod")
            seen.add(name)


def effective_pod_requests(pod_spec: Mapping, path: str = "spec") -> dict[str, int]:
    """What the kube-scheduler reserves for one pod, per resource, in milli-units (clusters.rules.pods); a pod the API
    server would not create is refused here (`check_resource_requirements`)."""
    if not _list(pod_spec.get("containers"), f"{path}.containers"):
        raise JobSetError(f"{path}.containers", "a pod needs at least one container")
    try:
        requests = effective_requests(pod_spec)
        check_resource_requirements(pod_spec)
        return requests
    except PodSpecError as exc:
        raise JobSetError(f"{path}.{exc.path}", exc.message) from None


def _exclusive_key(annotations: Mapping, path: str) -> str | None:
    key = annotations.get(EXCLUSIVE_TOPOLOGY_ANNOTATION)
    if key is None:
        return None
    try:
        requirements = parse_selector(key).requirements
    except ValueError:
        requirements = ()
    if len(requirements) != 1 or requirements[0].operator != "Exists" or requirements[0].key != key:
        raise JobSetError(f"{path}[{EXCLUSIVE_TOPOLOGY_ANNOTATION!r}]",
                          f"{key!r} is not a node label key (e.g. topology.kubernetes.io/zone)")
    return key


def _required_affinity(pod_spec: Mapping, pod_path: str) -> tuple[NodeSelectorTerm, ...] | None:
    """The pod's required node affinity as the API server checks it (terms ORed, each an AND)."""
    affinity = _mapping(pod_spec.get("affinity"), f"{pod_path}.affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), f"{pod_path}.affinity.nodeAffinity")
    path = f"{pod_path}.{_REQUIRED_AFFINITY}"
    if node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") is None:
        return None
    required = _mapping(node_affinity["requiredDuringSchedulingIgnoredDuringExecution"], path)
    terms = _list(required.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
    if not terms:
        raise JobSetError(f"{path}.nodeSelectorTerms", "needs at least one term; remove the required node "
                                                       "affinity if any node will do")
    parsed = []
    for i, term in enumerate(terms):
        try:
            parsed.append(node_selector_term(term))
        except TermError as exc:
            raise JobSetError(f"{path}.nodeSelectorTerms[{i}]{'.' + exc.path if exc.path else ''}",
                              exc.message) from None
    return tuple(parsed)


# ReplicatedJobs parsed, by their text: the JobSets of a pipeline differ in their names, not their parts, and a new
# leader parses every pending one (100,000 took 4 s of its first cycle). Parts longer than PART_KEPT_CHARS are parsed
# each time, so what is kept stays under ten megabytes. A part that does not parse is not kept: its error names its
# place in the JobSet (`path`).
_PARTS: dict[tuple[str, str | None], PartSpec] = {}
PARTS_KEPT, PART_KEPT_CHARS = 1024, 8192


def _part(raw: Any, path: str, job_exclusive: str | None) -> PartSpec:
    text = repr(raw)  # of JSON values: equal text, equal values
    if len(text) > PART_KEPT_CHARS:
        return _parse_part(raw, path, job_exclusive)
    key = (text, job_exclusive)
    part = _PARTS.get(key)
    if part is None:
        part = _parse_part(raw, path, job_exclusive)
        if len(_PARTS) >= PARTS_KEPT:
            _PARTS.clear()
        _PARTS[key] = part
    return part


def _parse_part(raw: Any, path: str, job_exclusive: str | None) -> PartSpec:
    raw = _mapping(raw, path)
    name = _dns_label(raw.get("name"), f"{path}.name", "the ReplicatedJob name")
    replicas = _positive_int(raw.get("replicas"), f"{path}.replicas", 1)
    template = _mapping(raw.get("template"), f"{path}.template")
    _, annotations = _metadata(template, f"{path}.template")
    exclusive = _exclusive_key(annotations, f"{path}.template.metadata.annotations") or job_exclusive
    job_spec = _mapping(template.get("spec"), f"{path}.template.spec")
    parallelism = _positive_int(job_spec.get("parallelism"), f"{path}.template.spec.parallelism", 1)
    completions = _positive_int(job_spec.get("completions"), f"{path}.template.spec.completions", None)
    if completions is not None:
        parallelism = min(parallelism, completions)  # a Job never runs more pods at once than it must complete
    pod_template = _mapping(job_spec.get("template"), f"{path}.template.spec.template")
    pod_path = f"{path}.{_POD_PATH}"
    _metadata(pod_template, f"{path}.template.spec.template")
    pod_spec = _mapping(pod_template.get("spec"), pod_path)
    if not pod_spec:
        raise JobSetError(pod_path, "the Job template needs a pod spec with containers")
    _container_names(pod_spec, pod_path)
    tolerations = tuple(_mapping(t, f"{pod_path}.tolerations[{i}]")
                        for i, t in enumerate(_list(pod_spec.get("tolerations"), f"{pod_path}.tolerations")))
    for i, toleration in enumerate(tolerations):
        if (wrong := toleration_error(toleration)) is not None:
            raise JobSetError(f"{pod_path}.tolerations[{i}].{wrong[0]}", wrong[1])
    return PartSpec(
        name=name, replicas=replicas, parallelism=parallelism, completions=completions,
        pod_requests=_frozen({**effective_pod_requests(pod_spec, pod_path), POD_SLOT: 1000}),
        tolerations=tuple(MappingProxyType(dict(t)) for t in tolerations),
        node_selector=_frozen(_labels(pod_spec.get("nodeSelector"), f"{pod_path}.nodeSelector")),
        exclusive_topology=exclusive, node_affinity=_required_affinity(pod_spec, pod_path),
    )


def _choice(annotations: Mapping, key: str, allowed: tuple[str, ...], default: str | None) -> str | None:
    value = annotations.get(key)
    if value is None:
        return default
    if value not in allowed:
        raise JobSetError(f"metadata.annotations[{key!r}]",
                          f"{value!r} is not one of {', '.join(allowed)}")
    return value


def _success_policy(raw: Any, names: set[str]) -> None:
    """As the JobSet webhook checks it: a known operator over ReplicatedJobs the JobSet has (the
    broker judges a split job by it, so a target it cannot meet would leave the job running for ever)."""
    policy = _mapping(raw, "spec.successPolicy")
    operator = policy.get("operator", "All")
    if operator not in ("All", "Any"):
        raise JobSetError("spec.successPolicy.operator", f"{operator!r} is not one of All, Any")
    for i, target in enumerate(_list(policy.get("targetReplicatedJobs"), "spec.successPolicy.targetReplicatedJobs")):
        if target not in names:
            raise JobSetError(f"spec.successPolicy.targetReplicatedJobs[{i}]",
                              f"{target!r} is not a ReplicatedJob of this JobSet; name one of {', '.join(sorted(names))}")


def startup_timeout(text: str) -> float | None:
    """Seconds in `archipelago.io/startup-timeout` ("600", "600s", "10m", "1h"), or None if it is not one."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        return None
    return int(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2] or "s"]


def parse_jobset(manifest: Any) -> JobSpec:
    """Validate a JobSet manifest and return what placement needs; raise JobSetError on the first problem."""
    manifest = _mapping(manifest, "$")
    if manifest.get("apiVersion") != API_VERSION:
        raise JobSetError("apiVersion", f"must be {API_VERSION!r}, got {manifest.get('apiVersion')!r}")
    if manifest.get("kind") != KIND:
        raise JobSetError("kind", f"must be {KIND!r}, got {manifest.get('kind')!r}")
    metadata = _mapping(manifest.get("metadata"), "metadata")
    name = _dns_label(metadata.get("name"), "metadata.name", "the JobSet name")
    namespace = metadata.get("namespace")
    if namespace is not None:
        _dns_label(namespace, "metadata.namespace", "the namespace")
    labels = _labels(metadata.get("labels"), "metadata.labels")
    annotations = _annotations(metadata.get("annotations"), "metadata.annotations")

    placement = _choice(annotations, PLACEMENT_ANNOTATION, PLACEMENT_MODES, "whole")
    topology_mode = _choice(annotations, TOPOLOGY_MODE_ANNOTATION, TOPOLOGY_MODES, None)
    try:
        cluster_selector = parse_selector(annotations.get(CLUSTER_SELECTOR_ANNOTATION, ""))
    except ValueError as exc:
        raise JobSetError(f"metadata.annotations[{CLUSTER_SELECTOR_ANNOTATION!r}]", str(exc)) from None
    highest_tier = None
    if HIGHEST_TIER_ANNOTATION in annotations:
        text = annotations[HIGHEST_TIER_ANNOTATION]
        if not re.fullmatch(r"\d{1,9}", text.strip()) or int(text) < 1:
            raise JobSetError(f"metadata.annotations[{HIGHEST_TIER_ANNOTATION!r}]",
                              f"{text!r} must be a tier number of 1 or more, e.g. \"2\"")
        highest_tier = int(text)
        if topology_mode != "hard":
            raise JobSetError(f"metadata.annotations[{HIGHEST_TIER_ANNOTATION!r}]",
                              f"only applies with {TOPOLOGY_MODE_ANNOTATION}: hard; add it or remove the tier")
    elif topology_mode == "hard":
        highest_tier = DEFAULT_HIGHEST_TIER

    spec = _mapping(manifest.get("spec"), "spec")
    job_exclusive = _exclusive_key(annotations, "metadata.annotations")
    raw_parts = _list(spec.get("replicatedJobs"), "spec.replicatedJobs")
    if not raw_parts:
        raise JobSetError("spec.replicatedJobs", "a JobSet needs at least one ReplicatedJob")
    parts, seen = [], set()
    for i, raw in enumerate(raw_parts):
        part = _part(raw, f"spec.replicatedJobs[{i}]", job_exclusive)
        if part.name in seen:
            raise JobSetError(f"spec.replicatedJobs[{i}].name",
                              f"{part.name!r} is used twice; ReplicatedJob names must be unique")
        seen.add(part.name)
        parts.append(part)
    if placement == "split":  # each part runs as its own JobSet named <name>-<part> on its member
        for i, part in enumerate(parts):
            if len(name) + 1 + len(part.name) > 63:
                raise JobSetError(f"spec.replicatedJobs[{i}].name",
                                  f"in split mode this part runs as the JobSet {name}-{part.name}, "
                                  f"{len(name) + 1 + len(part.name)} characters; shorten the names to 63 in all")
    _success_policy(spec.get("successPolicy"), seen)
    failure_policy = _mapping(spec.get("failurePolicy"), "spec.failurePolicy")
    max_restarts = failure_policy.get("maxRestarts", 0)
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or not 0 <= max_restarts <= 2**31 - 1:
        raise JobSetError("spec.failurePolicy.maxRestarts", f"must be a whole number ≥ 0 and ≤ 2147483647 (an int32), "
                                                            f"got {max_restarts!r:.60}")
    if MAX_RESTARTS_ANNOTATION in annotations:
        text = annotations[MAX_RESTARTS_ANNOTATION]
        if not re.fullmatch(r"\d{1,6}", text.strip()):
            raise JobSetError(f"metadata.annotations[{MAX_RESTARTS_ANNOTATION!r}]",
                              f"{text!r} must be a whole number ≥ 0, e.g. \"3\"")
        max_restarts = int(text)

    if STARTUP_TIMEOUT_ANNOTATION in annotations and startup_timeout(annotations[STARTUP_TIMEOUT_ANNOTATION]) is None:
        raise JobSetError(f"metadata.annotations[{STARTUP_TIMEOUT_ANNOTATION!r}]",
                          f"{annotations[STARTUP_TIMEOUT_ANNOTATION]!r} must be a duration such as \"600s\", "
                          "\"10m\" or \"1h\"")
    if annotations.get(ON_PREEMPTION_ANNOTATION, "requeue") not in ON_PREEMPTION:
        raise JobSetError(f"metadata.annotations[{ON_PREEMPTION_ANNOTATION!r}]",
                          f"{annotations[ON_PREEMPTION_ANNOTATION]!r:.60} must be requeue (back in its queue when "
                          "preempted, the default) or fail")

    return JobSpec(
        name=name, namespace=namespace, labels=_frozen(labels), annotations=_frozen(annotations),
        queue=labels.get(QUEUE_LABEL), priority_class=labels.get(PRIORITY_CLASS_LABEL),
        placement=placement, cluster_selector=cluster_selector, topology_mode=topology_mode,
        highest_tier_allowed=highest_tier, parts=tuple(parts), max_restarts=max_restarts,
    )
