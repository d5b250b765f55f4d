"""Taints and tolerations, as the Kubernetes scheduler matches them."""

from __future__ import annotations

from typing import Iterable, Mapping

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(toleration: Mapping, taint: Mapping) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    if key and key != taint.get("key"):
        return False
    if toleration.get("operator") == "Exists":  # anything else is Equal, the default
        return True
    return bool(key) and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated(taints: Iterable[Mapping], tolerations: Iterable[Mapping]) -> list[Mapping]:
    """The taints that keep a pod with these tolerations off (PreferNoSchedule never does)."""
    tolerations = list(tolerations)
    return [t for t in taints
            if t.get("effect") in _BLOCKING_EFFECTS and not any(tolerates(tol, t) for tol in tolerations)]


def describe_taint(taint: Mapping) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + value if value else ''}:{taint.get('effect')}"


# The node lifecycle controller taints a node while a condition lasts (not-ready, unreachable,
# unschedulable, memory-pressure, ...): they go when the node is back, unlike an admin's taints.
CONDITION_TAINT_PREFIX = "node.kubernetes.io/"


def lasting(taints: Iterable[Mapping]) -> tuple[Mapping, ...]:
    """The taints that stay when the node's conditions clear."""
    return tuple(t for t in taints if not str(t.get("key", "")).startswith(CONDITION_TAINT_PREFIX))
