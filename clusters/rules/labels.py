"""Kubernetes label selectors: the string form (`a=b,c in (x,y),!d`) and `matchLabels`/`matchExpressions`.

Pure and dependency-free so that the broker (cluster selectors) and the simulator (list filters,
node affinity) share one implementation of the same rules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterable

_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"({_SUBDOMAIN}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")  # \Z: not before a final newline
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


_INTEGER = re.compile(r"[+-]?[0-9]+")


def _int64(text: str) -> int | None:
    """A decimal integer as Go's strconv.ParseInt reads one (ASCII digits, an optional sign, 64 bits), else None."""
    if _INTEGER.fullmatch(text) is None or not -2**63 <= (value := int(text)) < 2**63:
        return None
    return value


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        actual, bound = (_int64(labels[self.key]) if present else None), _int64(self.values[0])
        if actual is None or bound is None:
            return False
        return actual > bound if self.operator == "Gt" else actual < bound

    def __str__(self) -> str:
        if self.operator == "Exists":
            return self.key
        if self.operator == "DoesNotExist":
            return f"!{self.key}"
        if self.operator in ("Gt", "Lt"):
            return f"{self.key} {'>' if self.operator == 'Gt' else '<'} {self.values[0]}"
        if len(self.values) == 1:
            return f"{self.key}{'=' if self.operator == 'In' else '!='}{self.values[0]}"
        return f"{self.key} {'in' if self.operator == 'In' else 'notin'} ({','.join(self.values)})"


@dataclass(frozen=True)
class Selector:
    """All requirements must hold; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def is_qualified_name(key: Any) -> bool:
    """Kubernetes' qualified name (a label or annotation key, a resource name): an optional DNS subdomain of at most
    253 characters and '/', then at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric."""
    return isinstance(key, str) and _KEY.fullmatch(key) is not None and len(key.rpartition("/")[0]) <= 253


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def is_dns_label(value: Any) -> bool:
    """A DNS-1123 label (a namespace's or an object's name): at most 63 lowercase letters, digits or '-', starting
    and ending with a letter or digit."""
    return isinstance(value, str) and len(value) <= 63 and _DNS_LABEL.fullmatch(value) is not None


def is_label_value(value: Any) -> bool:
    """At most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric; or empty."""
    return isinstance(value, str) and _VALUE.match(value) is not None


def check_labels(labels: Mapping[str, str]) -> None:
    """Raise ValueError naming the first key or value that Kubernetes would not accept as a label."""
    for key, value in labels.items():
        if not is_qualified_name(key):
            raise ValueError(f"invalid label key {key!r}")
        if not is_label_value(value):
            raise ValueError(f"invalid value {value!r} of label {key!r}: at most 63 characters, alphanumerics, "
                             "'-', '_' or '.', starting and ending with an alphanumeric")


# As kube-apiserver bounds an object's annotations: keys and values together.
MAX_ANNOTATIONS_BYTES = 256 * 1024


def check_annotations(annotations: Mapping[str, str]) -> None:
    """Raise ValueError naming the first key Kubernetes would not accept, or the total size if over its bound."""
    for key in annotations:
        if not is_qualified_name(key):
            raise ValueError(f"invalid annotation key {key!r}: an optional DNS prefix and '/', then at most 63 "
                             "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric")
    size = sum(len(key.encode()) + len(str(value).encode()) for key, value in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        raise ValueError(f"the annotations take {size} bytes; Kubernetes allows at most {MAX_ANNOTATIONS_BYTES} "
                         "(keys and values together)")


def _check_key(key: str, text: str) -> str:
    if not is_qualified_name(key):
        raise ValueError(f"invalid label key {key!r} in selector {text!r}")
    return key


def _check_values(values: Iterable[str], text: str) -> tuple[str, ...]:
    checked = tuple(v.strip() for v in values)
    for value in checked:
        if not _VALUE.match(value):
            raise ValueError(f"invalid label value {value!r} in selector {text!r}")
    return checked


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside a parenthesised value set."""
    terms, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ')' in selector {text!r}")
        elif char == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '(' in selector {text!r}")
    terms.append(text[start:])
    return [t.strip() for t in terms]


_SET_TERM = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)\Z")
_CMP_TERM = re.compile(r"^([^<>=!\s]+)\s*(==|=|!=|>|<)\s*(.*)\Z")


def parse_selector(text: str) -> Selector:
    """Parse the string form; raise ValueError saying which term is wrong."""
    text = (text or "").strip()
    if not text:
        return Selector()
    requirements = []
    for term in _split_terms(text):
        if not term:
            raise ValueError(f"empty term in selector {text!r}")
        if m := _SET_TERM.match(term):
            values = _check_values(m.group(3).split(","), text)
            if not values or any(not v for v in values):
                raise ValueError(f"empty value set in {term!r}")
            op = "In" if m.group(2) == "in" else "NotIn"
            requirements.append(Requirement(_check_key(m.group(1), text), op, values))
        elif m := _CMP_TERM.match(term):
            key, op, value = _check_key(m.group(1), text), m.group(2), m.group(3).strip()
            if op in (">", "<"):
                if not re.fullmatch(r"-?\d+", value):
                    raise ValueError(f"{term!r}: '{op}' needs an integer")
                requirements.append(Requirement(key, "Gt" if op == ">" else "Lt", (value,)))
            else:
                requirements.append(Requirement(key, "NotIn" if op == "!=" else "In",
                                                _check_values([value], text)))
        elif term.startswith("!"):
            requirements.append(Requirement(_check_key(term[1:].strip(), text), "DoesNotExist"))
        else:
            requirements.append(Requirement(_check_key(term, text), "Exists"))
    return Selector(tuple(requirements))


def selector_from_object(obj: Mapping | None) -> Selector:
    """A `metav1.LabelSelector` (matchLabels + matchExpressions) or a node selector term."""
    if not obj:
        return Selector()
    requirements = [Requirement(k, "In", (str(v),)) for k, v in (obj.get("matchLabels") or {}).items()]
    for expr in obj.get("matchExpressions") or []:
        operator = expr.get("operator")
        if operator not in _OPERATORS:
            raise ValueError(f"unknown selector operator {operator!r}")
        requirements.append(Requirement(expr["key"], operator, tuple(str(v) for v in expr.get("values") or ())))
    return Selector(tuple(requirements))


NODE_NAME_FIELD = "metadata.name"  # the one field a node selector term may match


@dataclass(frozen=True)
class NodeSelectorTerm:
    """One term of a required node affinity, as the kube-scheduler reads it: every `matchExpressions`
    requirement holds on the node's labels and every `matchFields` one on its name. A term with
    neither matches no node; the terms of an affinity are ORed."""

    expressions: Selector = Selector()
    fields: Selector = Selector()

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions.requirements and not self.fields.requirements:
            return False
        return self.expressions.matches(labels) and self.fields.matches({NODE_NAME_FIELD: name})


def node_requirement(expr: Mapping, field: bool) -> Requirement:
    """One `matchExpressions` (field=False) or `matchFields` (field=True) entry, checked as the API server
    checks it; ValueError says what is wrong."""
    if not isinstance(expr, Mapping):
        raise ValueError("must be an object with key, operator and values")
    key, operator, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"values must be a list of strings, got {values!r}")
    if field:
        if key != NODE_NAME_FIELD:
            raise ValueError(f"key {key!r} is not a node field; the only one is {NODE_NAME_FIELD}")
        if operator not in ("In", "NotIn"):
            raise ValueError(f"operator {operator!r} is not one of In, NotIn for a node field")
        if len(values) != 1:
            raise ValueError(f"{operator} on {NODE_NAME_FIELD} takes exactly one value (use one term per node), "
                             f"got {len(values)}")
        return Requirement(key, operator, tuple(values))
    if not is_qualified_name(key):
        raise ValueError(f"key {key!r} is not a label key")
    if operator not in _OPERATORS:
        raise ValueError(f"operator {operator!r} is not one of {', '.join(_OPERATORS)}")
    if operator in ("In", "NotIn") and not values:
        raise ValueError(f"{operator} needs at least one value")
    if operator in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"{operator} takes no values")
    if operator in ("Gt", "Lt") and (len(values) != 1 or _int64(values[0]) is None):
        raise ValueError(f"{operator} takes exactly one integer value, got {values!r}")
    return Requirement(key, operator, tuple(values))


class TermError(ValueError):
    """A wrong entry of a node selector term: `path` is relative to the term (`matchFields[0]`)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path, self.message = path, message


def node_selector_term(term: Any) -> NodeSelectorTerm:
    """A node selector term (`matchExpressions`, `matchFields`); TermError names its first wrong entry."""
    if not isinstance(term, Mapping):
        raise TermError("", "a node selector term must be an object with matchExpressions and/or matchFields")
    selectors = []
    for name, field in (("matchExpressions", False), ("matchFields", True)):
        entries = term.get(name) or []
        if not isinstance(entries, list):
            raise TermError(name, f"must be a list, got {type(entries).__name__}")
        requirements = []
        for j, expr in enumerate(entries):
            try:
                requirements.append(node_requirement(expr, field))
            except ValueError as exc:
                raise TermError(f"{name}[{j}]", str(exc)) from None
        selectors.append(Selector(tuple(requirements)))
    return NodeSelectorTerm(*selectors)


def pin_to_nodes(required: Mapping | None, nodes: Iterable[str]) -> dict:
    """The required node affinity (`requiredDuringSchedulingIgnoredDuringExecution`) that admits only
    `nodes` and keeps the pod's own (`required`, or None), as the DaemonSet controller pins a pod: a
    `matchFields` requirement `metadata.name In [node]` (the API server takes one value there), ANDed
    into each of the pod's terms, one copy per node. A copy whose own `matchFields` rule the node out,
    and a term that matches nothing (empty), are left out: no term admits what the pod's did not."""
    own = None if required is None else [t for t in required.get("nodeSelectorTerms") or ()
                                         if t.get("matchExpressions") or t.get("matchFields")]
    terms = [{}] if own is None else own
    pinned = [{**term, "matchFields": [*(term.get("matchFields") or ()),
                                       {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}]}
              for node in nodes for term in terms
              if node_selector_term({"matchFields": term.get("matchFields")}).fields.matches({NODE_NAME_FIELD: node})]
    return {**(required or {}), "nodeSelectorTerms": pinned}
