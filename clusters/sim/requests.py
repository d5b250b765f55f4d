"""What the simulated kube-scheduler reserves on a node for one pod, in milli-units (the kube-scheduler's
`PodRequests`), written here from the Kubernetes rules and not shared with the broker (`clusters/rules/pods.py`): a
simulator that counted with the broker's own function would agree with it by construction, and no test would see
the broker count a pod differently from the member.

1. The containers' requests add up (a limit without a request is the request: the API server's defaulting).
2. Init containers run one at a time before them: the largest one counts, beside the sidecars (init containers
   with restartPolicy Always) started before it; the sidecars run on beside the containers.
3. Pod-level requests (`spec.resources`, cpu, memory and hugepages) replace the containers' total of each resource
   they name; a pod-level limit alone is the request of a resource no container asks for, and of hugepages always
   (the API server's defaulting).
4. The pod overhead (its RuntimeClass's) adds to all of it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from clusters.rules.quantity import to_milli


def _amounts(quantities: Mapping | None) -> Counter:
    return Counter({name: to_milli(str(quantity)) for name, quantity in (quantities or {}).items()})


def _asked(container: Mapping) -> Counter:
    resources = container.get("resources") or {}
    return Counter({**_amounts(resources.get("limits")), **_amounts(resources.get("requests"))})


def _at_pod_level(resource: str) -> bool:
    return resource in ("cpu", "memory") or resource.startswith("hugepages-")


def pod_requests(spec: Mapping) -> dict[str, int]:
    """Per resource, plus the pod's slot (`pods`: 1000)."""
    total: Counter = Counter()
    for container in spec.get("containers") or ():
        total.update(_asked(container))
    sidecars: Counter = Counter()
    peak: Counter = Counter()
    for container in spec.get("initContainers") or ():
        asked = _asked(container)
        if container.get("restartPolicy") == "Always":
            sidecars.update(asked)
            total.update(asked)
            at_start = sidecars
        else:
            at_start = Counter(asked)
            at_start.update(sidecars)  # not `+`: that drops a request of 0, which still counts as asked for
        for name, amount in at_start.items():
            peak[name] = max(peak[name], amount)
    for name, amount in peak.items():
        total[name] = max(total[name], amount)
    pod_level = spec.get("resources") or {}
    requests, limits = _amounts(pod_level.get("requests")), _amounts(pod_level.get("limits"))
    for name, amount in limits.items():
        if name not in requests and (name not in total or name.startswith("hugepages-")):
            requests[name] = amount
    for name, amount in requests.items():
        if _at_pod_level(name):
            total[name] = amount
    total.update(_amounts(spec.get("overhead")))
    return {**{name: amount for name, amount in total.items() if amount > 0}, "pods": 1000}
