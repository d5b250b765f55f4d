"""What one pod reserves on a node, as the kube-scheduler counts it; and why pods are not ready.

The broker's (job demand, member usage). The simulator counts with its own reading of the kube-scheduler's rules
(clusters/sim/requests.py), so that a pod the broker counts differently from a member shows in the tests.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from clusters.rules.labels import is_qualified_name
from clusters.rules.quantity import QuantityRangeError, format_quantity, parse_quantity, to_milli


class PodSpecError(ValueError):
    """`path` is relative to the pod spec (`containers[0].resources.requests.cpu`)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def as_mapping(value: Any, path: str, error: type[ValueError] = PodSpecError) -> Mapping:
    """An object field of a manifest (absent is empty); `error(path, message)` names a wrong one."""
    if type(value) is dict:  # what a decoded body holds: the check every field of a submission pays first
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise error(path, f"must be an object, got {type(value).__name__}")
    return value


def as_list(value: Any, path: str, error: type[ValueError] = PodSpecError) -> list:
    """A list field of a manifest (absent is empty); `error(path, message)` names a wrong one."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise error(path, f"must be a list, got {type(value).__name__}")
    return value


def _not_quantity(quantity: Any, error: Exception) -> str:
    if isinstance(error, QuantityRangeError):
        return str(error)
    return f"{quantity!r:.60} is not a resource quantity (write e.g. \"500m\", \"4\", \"16Gi\")"


def container_requests(container: Any, path: str) -> dict[str, int]:
    """A container's requests in milli-units; as in Kubernetes, a limit without a request is the request. Its limits
    are parsed too, a limit a request shadows as well: the API server refuses a bad one either way."""
    resources = as_mapping(as_mapping(container, path).get("resources"), f"{path}.resources")
    limits, requests = (_quantities(resources.get(source), f"{path}.resources.{source}")
                        for source in ("limits", "requests"))
    return {**limits, **requests}


def _quantities(amounts: Any, path: str) -> dict[str, int]:
    parsed = {}
    for resource, quantity in as_mapping(amounts, path).items():
        try:
            parsed[resource] = to_milli(quantity)
        except (ValueError, TypeError) as exc:
            raise PodSpecError(f"{path}.{resource}", _not_quantity(quantity, exc)) from None
        if parsed[resource] < 0:
            raise PodSpecError(f"{path}.{resource}", "must not be negative")
    return parsed


# What a container may ask for by a name without a domain; hugepages-<size> besides.
STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
HUGEPAGES_PREFIX = "hugepages-"
QUOTA_PREFIX = "requests."  # an extended resource's quota is named so: no resource is


def _whole_pages(resource: str, quantity: Any) -> bool:
    """Is the amount a positive whole number of the pages its name sizes (hugepages-2Mi: 4Mi, not 3Mi)?"""
    try:
        size = math.ceil(parse_quantity(resource[len(HUGEPAGES_PREFIX):]))
    except ValueError:
        return False
    amount = math.ceil(parse_quantity(quantity))
    return size > 0 and amount > 0 and amount % size == 0


def _native(resource: str) -> bool:
    """Kubernetes' own resources: those without a domain, and those in a kubernetes.io domain."""
    return "/" not in resource or "kubernetes.io/" in resource


def check_resource_requirements(pod_spec: Mapping) -> None:
    """The API server's rules for its containers' requests and limits (`validateResourceRequirements`), and for the
    pod's own (`validatePodResources`): a pod that breaks one is never created, so a JobSet of such pods would hold
    its nodes on a member and never start. Raises PodSpecError naming the field. For a pod spec whose quantities
    `effective_requests` parsed."""
    for field_name in ("initContainers", "containers"):
        for i, container in enumerate(as_list(pod_spec.get(field_name), field_name)):
            resources = as_mapping(as_mapping(container, f"{field_name}[{i}]").get("resources"),
                                   f"{field_name}[{i}].resources")
            _check_container_resources(resources, f"{field_name}[{i}].resources")
    if as_mapping(pod_spec.get("resources"), "resources"):
        _check_pod_resources(pod_spec)


def _at_pod_level(resource: str) -> bool:
    """Resources a pod may ask for as a whole (`spec.resources`, Kubernetes' PodLevelResources)."""
    return resource in ("cpu", "memory") or resource.startswith(HUGEPAGES_PREFIX)


def _check_pod_resources(pod_spec: Mapping) -> None:
    """Pod-level requests and limits: of cpu, memory or hugepages only, not on Windows, no container's limit above
    the pod's, and a request (set, or defaulted: `_pod_requests`) at least what the containers ask for together and
    at most the pod's limit."""
    resources = as_mapping(pod_spec.get("resources"), "resources")
    if as_mapping(pod_spec.get("os"), "os").get("name") == "windows":
        raise PodSpecError("resources", "pod-level resources may not be set for a Windows pod: set them on its "
                                        "containers")
    for source in ("limits", "requests"):
        for resource in as_mapping(resources.get(source), f"resources.{source}"):
            if not _at_pod_level(resource):
                raise PodSpecError(f"resources.{source}.{resource}",
                                   f"{resource!r:.80} cannot be asked for by the pod as a whole: only cpu, memory and "
                                   f"hugepages-<size> can; ask for it in a container's resources")
    _check_container_resources(resources, "resources")
    asked = _quantities(resources.get("requests"), "resources.requests")
    limits = _quantities(resources.get("limits"), "resources.limits")
    together = _containers_together(pod_spec)
    for i, container in enumerate(as_list(pod_spec.get("containers"), "containers")):
        for resource, amount in _quantities(as_mapping(as_mapping(container, f"containers[{i}]").get("resources"),
                                                       f"containers[{i}].resources").get("limits"),
                                            f"containers[{i}].resources.limits").items():
            if resource in limits and amount > limits[resource]:
                raise PodSpecError(f"containers[{i}].resources.limits.{resource}",
                                   f"must not exceed the pod's {resource} limit "
                                   f"({format_quantity(limits[resource], resource)})")
    for resource, amount in _pod_requests(pod_spec, together).items():
        if resource not in asked and amount > limits[resource]:  # defaulted from what the containers ask for
            raise PodSpecError(f"resources.limits.{resource}",
                               f"must be at least what the containers ask for together "
                               f"({format_quantity(together[resource], resource)}): the pod's request is taken from "
                               f"them")
        if amount < together.get(resource, 0):
            raise PodSpecError(f"resources.{'requests' if resource in asked else 'limits'}.{resource}",
                               f"must be at least what the containers ask for together "
                               f"({format_quantity(together[resource], resource)})")


def _check_container_resources(resources: Mapping, path: str) -> None:
    requests, limits = as_mapping(resources.get("requests"), path), as_mapping(resources.get("limits"), path)
    for source, amounts in (("limits", limits), ("requests", requests)):
        for resource, quantity in amounts.items():
            where = f"{path}.{source}.{resource}"
            if not is_qualified_name(resource):
                raise PodSpecError(where, f"{resource!r:.80} is not a resource name: an optional domain and '/', then "
                                          f"at most 63 alphanumerics, '-', '_' or '.' (e.g. nvidia.com/gpu)")
            if resource.startswith(HUGEPAGES_PREFIX) and not _whole_pages(resource, quantity):
                raise PodSpecError(where, f"{quantity!r} is not a positive whole number of {resource} pages "
                                          f"(hugepages-<page size>, e.g. hugepages-2Mi: 1Gi)")
            if "/" not in resource and resource not in STANDARD_CONTAINER_RESOURCES \
                    and not resource.startswith(HUGEPAGES_PREFIX):
                raise PodSpecError(where, f"{resource!r} is not a resource a container may ask for: use cpu, memory, "
                                          f"ephemeral-storage, hugepages-<size>, or a device plugin's resource with "
                                          f"its domain (e.g. nvidia.com/gpu)")
            if _native(resource):
                continue
            if resource.startswith(QUOTA_PREFIX):
                raise PodSpecError(where, f"{resource!r} is not an extended resource name: drop the \"requests.\" "
                                          f"prefix (it names a quota, not a resource)")
            if not is_qualified_name(QUOTA_PREFIX + resource):  # its quota's name: the domain 9 characters longer
                raise PodSpecError(where, f"{resource!r:.80} is not an extended resource name: its domain is longer "
                                          f"than 244 characters")
            if to_milli(quantity) % 1000:
                raise PodSpecError(where, f"{quantity!r} is not a whole number: {resource} is counted in whole units")
    for resource, quantity in requests.items():
        overcommitted = _native(resource) and not resource.startswith(HUGEPAGES_PREFIX)
        if resource not in limits:
            if not overcommitted:
                raise PodSpecError(f"{path}.limits.{resource}", f"set a limit for {resource}, equal to the request: "
                                                                f"Kubernetes never overcommits it (or set only the "
                                                                f"limit: the request is taken from it)")
            continue
        request, limit = to_milli(quantity), to_milli(limits[resource])
        if not overcommitted and request != limit:
            raise PodSpecError(f"{path}.requests.{resource}", f"must equal the {resource} limit ({limits[resource]}):"
                                                              f" Kubernetes never overcommits it")
        if request > limit:
            raise PodSpecError(f"{path}.requests.{resource}", f"must not exceed the {resource} limit "
                                                              f"({limits[resource]})")
    names = requests.keys() | limits.keys()
    if any(r.startswith(HUGEPAGES_PREFIX) for r in names) and not names & {"cpu", "memory"}:
        raise PodSpecError(path, "hugepages need a cpu or memory request or limit beside them")


def _pod_requests(pod_spec: Mapping, together: Mapping[str, int]) -> dict[str, int]:
    """The pod's own requests (`spec.resources`) once the API server has defaulted them (`defaultPodRequests`): only
    when the pod sets limits, a request it leaves out is what its containers ask for `together`, or, when none does,
    its limit — the limit always for hugepages."""
    resources = as_mapping(pod_spec.get("resources"), "resources")
    requests = {r: a for r, a in _quantities(resources.get("requests"), "resources.requests").items()
                if _at_pod_level(r)}
    limits = _quantities(resources.get("limits"), "resources.limits")
    for resource, amount in limits.items():
        if resource not in requests and _at_pod_level(resource):
            requests[resource] = together[resource] if resource in together and \
                not resource.startswith(HUGEPAGES_PREFIX) else amount
    return requests


def effective_requests(pod_spec: Mapping) -> dict[str, int]:
    """Per resource, in milli-units: what the containers ask for together (`_containers_together`), each resource
    the pod asks for as a whole replaced by that (`_pod_requests`), + the pod overhead. Raises PodSpecError naming
    the bad field."""
    effective = _containers_together(pod_spec)
    effective.update(_pod_requests(pod_spec, effective))
    for resource, quantity in as_mapping(pod_spec.get("overhead"), "overhead").items():
        try:
            amount = to_milli(quantity)
        except (ValueError, TypeError) as exc:
            raise PodSpecError(f"overhead.{resource}", _not_quantity(quantity, exc)) from None
        if amount < 0:  # it would lower the pod's demand below what its containers take
            raise PodSpecError(f"overhead.{resource}", "must not be negative")
        effective[resource] = effective.get(resource, 0) + amount
    return {r: a for r, a in sorted(effective.items()) if a > 0}


def _containers_together(pod_spec: Mapping) -> dict[str, int]:
    """max(app containers + sidecars, the largest init container + the sidecars started before it)."""
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(as_list(pod_spec.get("initContainers"), "initContainers")):
        requests = container_requests(container, f"initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            for resource, amount in requests.items():
                sidecars[resource] = sidecars.get(resource, 0) + amount
            requests = dict(sidecars)
        else:
            requests = {r: requests.get(r, 0) + sidecars.get(r, 0) for r in requests.keys() | sidecars.keys()}
        for resource, amount in requests.items():
            init_peak[resource] = max(init_peak.get(resource, 0), amount)
    running = dict(sidecars)
    for i, container in enumerate(as_list(pod_spec.get("containers"), "containers")):
        for resource, amount in container_requests(container, f"containers[{i}]").items():
            running[resource] = running.get(resource, 0) + amount
    return {r: max(running.get(r, 0), init_peak.get(r, 0)) for r in running.keys() | init_peak.keys()}


def why_not_ready(pods: Iterable[Mapping[str, Any]], limit: int = 3) -> str:
    """Why these pods are not ready, in the member's words, most common first:
    `3 pods Pending: 0/8 nodes are available: 8 Insufficient nvidia.com/gpu.; 1 pod ImagePullBackOff: …`."""
    reasons: Counter[str] = Counter()
    for pod in pods:
        status = pod.get("status") or {}
        conditions = {c.get("type"): c for c in status.get("conditions") or ()}
        if (conditions.get("Ready") or {}).get("status") == "True" or status.get("phase") in ("Succeeded", "Failed"):
            continue
        scheduled = conditions.get("PodScheduled") or {}
        waiting = next(((s.get("state") or {}).get("waiting") for s in status.get("containerStatuses") or ()
                        if (s.get("state") or {}).get("waiting")), None)
        if scheduled.get("status") == "False":
            reasons[f"{status.get('phase', 'Pending')}: {scheduled.get('message') or scheduled.get('reason')}"] += 1
        elif waiting:
            reasons[f"{waiting.get('reason')}: {waiting.get('message') or 'waiting'}"] += 1
        else:
            reasons[f"{status.get('phase', 'Pending')}: not ready"] += 1
    return "; ".join(f"{n} pod{'s' if n > 1 else ''} {why}" for why, n in reasons.most_common(limit))
