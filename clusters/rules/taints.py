"""Taints and tolerations, as the Kubernetes scheduler matches them."""

from __future__ import annotations

from typing import Iterable, Mapping

from clusters.rules.labels import is_label_value, is_qualified_name

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def tolerates(toleration: Mapping, taint: Mapping) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and bool(key) and (toleration.get("value") or "") == (taint.get("value") or "")


def toleration_error(toleration: Mapping) -> tuple[str, str] | None:
    """(field, what to fix) of a toleration the API server refuses (`validateTolerations`): a pod that carries it is
    never created."""
    key, operator, value = toleration.get("key") or "", toleration.get("operator") or "Equal", toleration.get("value")
    if key and not is_qualified_name(key):
        return "key", f"{key!r:.80} is not a taint key (a label key, e.g. nvidia.com/gpu)"
    if operator not in ("Equal", "Exists"):
        return "operator", f"{operator!r:.40} is not a toleration operator: use Equal or Exists"
    if operator == "Exists" and value:
        return "value", "must be empty with operator Exists (it matches every value)"
    if operator == "Equal" and not key:
        return "operator", "must be Exists when the key is empty (a toleration of every taint)"
    if value is not None and not is_label_value(value):
        return "value", f"{value!r:.80} is not a taint value (a label value)"
    effect = toleration.get("effect") or ""
    if effect and effect not in _EFFECTS:
        return "effect", f"{effect!r:.40} is not a taint effect: use {', '.join(_EFFECTS)}, or none for all"
    seconds = toleration.get("tolerationSeconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
        return "tolerationSeconds", f"{seconds!r:.40} is not a whole number of seconds"
    if seconds is not None and effect != "NoExecute":
        return "tolerationSeconds", "only a NoExecute toleration has a time limit: set effect NoExecute or drop it"
    return None


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
