"""What one pod reserves on a node, as the kube-scheduler counts it; and why pods are not ready.

Shared by the broker (job demand, member usage) and the simulator (binding), so that all three
agree to the milli-unit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from clusters.quantity import QuantityRangeError, to_milli


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
    """A container's requests in milli-units; as in Kubernetes, a limit without a request is the request."""
    resources = as_mapping(as_mapping(container, path).get("resources"), f"{path}.resources")
    merged = {**as_mapping(resources.get("limits"), f"{path}.resources.limits"),
              **as_mapping(resources.get("requests"), f"{path}.resources.requests")}
    source = "requests" if resources.get("requests") else "limits"
    parsed = {}
    for resource, quantity in merged.items():
        try:
            parsed[resource] = to_milli(quantity)
        except (ValueError, TypeError) as exc:
            raise PodSpecError(f"{path}.resources.{source}.{resource}", _not_quantity(quantity, exc)) from None
        if parsed[resource] < 0:
            raise PodSpecError(f"{path}.resources.{source}.{resource}", "must not be negative")
    return parsed


def effective_requests(pod_spec: Mapping) -> dict[str, int]:
    """Per resource, in milli-units: max(app containers + sidecars, the largest init container + the
    sidecars started before it) + the pod overhead. Raises PodSpecError naming the bad field."""
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
    effective = {r: max(running.get(r, 0), init_peak.get(r, 0)) for r in running.keys() | init_peak.keys()}
    for resource, quantity in as_mapping(pod_spec.get("overhead"), "overhead").items():
        try:
            amount = to_milli(quantity)
        except (ValueError, TypeError) as exc:
            raise PodSpecError(f"overhead.{resource}", _not_quantity(quantity, exc)) from None
        if amount < 0:  # it would lower the pod's demand below what its containers take
            raise PodSpecError(f"overhead.{resource}", "must not be negative")
        effective[resource] = effective.get(resource, 0) + amount
    return {r: a for r, a in sorted(effective.items()) if a > 0}


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
