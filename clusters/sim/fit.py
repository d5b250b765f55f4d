"""Which nodes the simulated kube-scheduler lets a pod onto — its node selector, required node affinity and
tolerations — written here from the Kubernetes rules and not shared with the broker (`clusters/rules/labels.py`,
`clusters/rules/taints.py`): a simulator that matched with the broker's own functions would agree with it by
construction, and no test would see the broker send a pod where a member will not bind it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

_BLOCKING = ("NoSchedule", "NoExecute")  # PreferNoSchedule only steers


def _expression_holds(expression: Mapping, value: str | None) -> bool:
    """One matchExpressions/matchFields entry against a label's value (None: no such label). An entry the API
    server would have refused (an unknown operator, a bound that is no integer) holds for no node."""
    operator, values = expression.get("operator"), expression.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        actual, bound = _parse_int(value), _parse_int(values[0])
        if actual is None or bound is None:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False


def _parse_int(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64): ASCII digits after an optional sign, within 64 bits."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not all("0" <= c <= "9" for c in digits):
        return None
    value = int(text)
    return value if -2**63 <= value < 2**63 else None


def _term_holds(term: Mapping, name: str, labels: Mapping[str, str]) -> bool:
    """A nodeSelectorTerm: all of its entries hold; an empty term selects no node."""
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return (all(_expression_holds(e, labels.get(e.get("key"))) for e in expressions)
            and all(e.get("key") == "metadata.name" and _expression_holds(e, name) for e in fields))


def selects(spec: Mapping, node: Mapping) -> bool:
    """Does the pod's nodeSelector (every pair) and required node affinity (any one term) admit the node?"""
    meta = node["metadata"]
    labels = meta.get("labels") or {}
    if any(labels.get(key) != value for key, value in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return any(_term_holds(term, meta["name"], labels) for term in required.get("nodeSelectorTerms") or ())


def _tolerates(toleration: Mapping, taint: Mapping) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    # Equal needs a key: the API server refuses a pod whose toleration has none
    return operator == "Equal" and bool(toleration.get("key")) and \
        (toleration.get("value") or "") == (taint.get("value") or "")


def repelling_taint(node: Mapping, tolerations: Sequence[Mapping]) -> Mapping | None:
    """The node's first NoSchedule or NoExecute taint the pod does not tolerate, if any."""
    for taint in (node.get("spec") or {}).get("taints") or ():
        if taint.get("effect") in _BLOCKING and not any(_tolerates(t, taint) for t in tolerations):
            return taint
    return None
