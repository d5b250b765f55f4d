"""A member's network topology as a HyperNode tree, resolved to the nodes beneath each HyperNode.

Two sources, one result (`Topology`):
- `resolve_hypernodes`: the member's Volcano HyperNode objects. Node members resolve as Volcano's
  scheduler does: `exactMatch` by name, `regexMatch` by an unanchored search over node names (Go's
  MatchString, with RE2: Go's syntax, and linear time whatever the pattern), `labelMatch` by a label selector (an empty one matches nothing). HyperNode members
  resolve by `exactMatch`, and also by `regexMatch` over HyperNode names, which Volcano's scheduler
  ignores but this project's own examples use (a fabric over `^spine-`).
- `derive_from_labels`: Volcano's label-based discovery, for members without HyperNode objects:
  per tier an ordered list of node label keys; the first key a node carries names its domain there.

Bad input never raises: a cycle, a HyperNode claimed by two parents, a node claimed by two
HyperNodes of one tier, or a member that names nothing becomes a warning, and the tree is kept
as sound as it can be (the offending edge is dropped).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import re2

from clusters.rules.labels import selector_from_object
from clusters.rules.warnings import Warnings
# Longest regexMatch pattern read (Volcano's CRD sets none): a member's patterns are untrusted input.
MAX_PATTERN = 1024
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is a topology warning, not a line on stderr


@dataclass(frozen=True)
class ResolvedHyperNode:
    name: str
    tier: int
    parent: str | None
    nodes: tuple[str, ...]  # every node beneath, sorted


@dataclass
class Topology:
    hypernodes: list[ResolvedHyperNode] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def resolve_hypernodes(objects: Iterable[Mapping], node_labels: Mapping[str, Mapping[str, str]]) -> Topology:
    """Resolve HyperNode objects against the member's nodes (name -> labels)."""
    warnings = Warnings()
    specs: dict[str, Mapping] = {}
    tiers: dict[str, int] = {}
    for obj in sorted(objects, key=lambda o: o["metadata"]["name"]):
        name, spec = obj["metadata"]["name"], obj.get("spec") or {}
        tier = spec.get("tier")
        if not isinstance(tier, int) or isinstance(tier, bool) or tier < 1:
            warnings.add("tier", f"HyperNode {name}: tier {tier!r} is not a positive integer; ignored")
            continue
        specs[name], tiers[name] = spec, tier

    direct: dict[str, set[str]] = {name: set() for name in specs}
    children: dict[str, list[str]] = {name: [] for name in specs}
    for name, spec in specs.items():
        for member in spec.get("members") or ():
            selector = member.get("selector") or {}
            if member.get("type") == "Node":
                direct[name] |= _match_nodes(name, selector, node_labels, warnings)
            elif member.get("type") == "HyperNode":
                children[name].extend(_match_hypernodes(name, selector, specs, warnings))
            else:
                warnings.add("member", f"HyperNode {name}: unknown member type {member.get('type')!r}; ignored")

    parent = _assign_parents(children, warnings)
    return _build(tiers, parent, direct, warnings)


def _match_nodes(owner: str, selector: Mapping, node_labels: Mapping[str, Mapping[str, str]],
                 warnings: Warnings) -> set[str]:
    if "exactMatch" in selector:
        name = (selector["exactMatch"] or {}).get("name")
        if name in node_labels:
            return {name}
        warnings.add("dangling", f"HyperNode {owner}: member node {name!r} does not exist")
        return set()
    if "regexMatch" in selector:
        regex = _regex(owner, selector, warnings)
        if regex is None:
            return set()
        found = {n for n in node_labels if regex.search(n)}
    elif "labelMatch" in selector:
        match = selector["labelMatch"] or {}
        if not match.get("matchLabels") and not match.get("matchExpressions"):
            return set()  # Volcano: an empty labelMatch selects nothing
        try:
            labels = selector_from_object(match)
        except (ValueError, KeyError, TypeError) as exc:
            warnings.add("member", f"HyperNode {owner}: labelMatch is not a label selector ({exc})")
            return set()
        found = {n for n, node in node_labels.items() if labels.matches(node)}
    else:
        warnings.add("member", f"HyperNode {owner}: a member has no exactMatch, regexMatch or labelMatch")
        return set()
    if not found:
        warnings.add("dangling", f"HyperNode {owner}: member selector {dict(selector)} matches no node")
    return found


def _regex(owner: str, selector: Mapping, warnings: Warnings) -> Any:
    """The compiled regexMatch pattern, or None with a warning. RE2, as Go's regexp that Volcano uses:
    the same syntax (no lookaround, no backreferences) and no catastrophic backtracking on a hostile
    pattern; Go's MatchString is a search, as `search` is."""
    pattern = (selector["regexMatch"] or {}).get("pattern") or ""
    if not isinstance(pattern, str):  # the CRD's schema says string; an agent's report need not have met it
        warnings.add("member", f"HyperNode {owner}: regexMatch pattern must be a string, got "
                               f"{type(pattern).__name__}; ignored")
        return None
    if len(pattern) > MAX_PATTERN:
        warnings.add("member", f"HyperNode {owner}: regexMatch pattern of {len(pattern)} characters is longer than "
                               f"the {MAX_PATTERN} read; ignored")
        return None
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except UnicodeEncodeError:  # a lone surrogate (JSON "\ud800"): RE2 reads UTF-8, which cannot carry it
        warnings.add("member", f"HyperNode {owner}: regexMatch {pattern!r} is not valid Unicode; ignored")
        return None
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        warnings.add("member", f"HyperNode {owner}: regexMatch {pattern!r} is not a regular expression Go's regexp "
                               f"(RE2) accepts ({reason}); ignored")
        return None


def _match_hypernodes(owner: str, selector: Mapping, specs: Mapping[str, Mapping], warnings: Warnings) -> list[str]:
    if "exactMatch" in selector:
        name = (selector["exactMatch"] or {}).get("name")
        if name in specs:
            return [name]
        warnings.add("dangling", f"HyperNode {owner}: member HyperNode {name!r} does not exist")
        return []
    if "regexMatch" in selector:
        regex = _regex(owner, selector, warnings)
        found = [n for n in specs if n != owner and regex.search(n)] if regex else []
        if regex and not found:
            warnings.add("dangling", f"HyperNode {owner}: regexMatch {regex.pattern!r} matches no HyperNode")
        return found
    warnings.add("member", f"HyperNode {owner}: a HyperNode member needs exactMatch or regexMatch")
    return []


def _assign_parents(children: Mapping[str, list[str]], warnings: Warnings) -> dict[str, str]:
    """child -> parent over the edges that keep the graph a forest: the first claimant (by name)
    keeps a child claimed twice, and an edge that would close a cycle is dropped."""
    parent: dict[str, str] = {}
    for owner in sorted(children):
        for child in children[owner]:
            if child in parent:
                if parent[child] != owner:
                    warnings.add("parents", f"HyperNode {child} is a member of both {parent[child]} and {owner}; "
                                            f"kept under {parent[child]}")
                continue
            ancestor, chain = owner, [owner]
            while ancestor in parent and ancestor != child:
                ancestor = parent[ancestor]
                chain.append(ancestor)
            if ancestor == child or owner == child:
                cycle = " -> ".join([*reversed(chain), child])
                warnings.add("cycle", f"HyperNode cycle {cycle}; the member {child} of {owner} is ignored")
                continue
            parent[child] = owner
    return parent


def _build(tiers: Mapping[str, int], parent: Mapping[str, str], direct: Mapping[str, set[str]],
           warnings: Warnings) -> Topology:
    kids: dict[str, list[str]] = {}
    for child, owner in parent.items():
        kids.setdefault(owner, []).append(child)
        if tiers[child] >= tiers[owner]:
            warnings.add("tiers", f"HyperNode {owner} (tier {tiers[owner]}) has member {child} of tier "
                                  f"{tiers[child]}; a member should be of a lower tier")
    resolved: dict[str, frozenset[str]] = {}

    def nodes_of(name: str) -> frozenset[str]:  # the forest has no cycles, so this ends
        if name not in resolved:
            below = set(direct[name])
            for child in kids.get(name, ()):
                below |= nodes_of(child)
            resolved[name] = frozenset(below)
        return resolved[name]

    by_tier: dict[int, dict[str, str]] = {}
    for name in sorted(tiers):
        for node in sorted(nodes_of(name)):
            claimed = by_tier.setdefault(tiers[name], {})
            if node in claimed:
                warnings.add("duplicate", f"node {node} is in both {claimed[node]} and {name} of tier {tiers[name]}")
            else:
                claimed[node] = name
    hypernodes = [ResolvedHyperNode(name, tiers[name], parent.get(name), tuple(sorted(nodes_of(name))))
                  for name in sorted(tiers, key=lambda n: (-tiers[n], n))]
    return Topology(hypernodes, warnings.messages())


def derive_from_labels(node_labels: Mapping[str, Mapping[str, str]], tier_labels: Sequence[Sequence[str]]) -> Topology:
    """One HyperNode per distinct domain at each tier (tier 1 = `tier_labels[0]`, the closest).

    A HyperNode is named after the label value, with `-tier<N>` appended when another tier already
    uses that name. A domain whose nodes name two different parents keeps the first (by node name).
    """
    warnings = Warnings()
    domain_name: dict[tuple[int, str], str] = {}
    members: dict[str, set[str]] = {}
    tier_of: dict[str, int] = {}
    parent: dict[str, str] = {}
    for node in sorted(node_labels):
        labels = node_labels[node]
        below: str | None = None
        for tier, keys in enumerate(tier_labels, start=1):
            value = next((labels[k] for k in keys if labels.get(k)), None)
            if value is None:
                continue
            name = domain_name.get((tier, value))
            if name is None:
                name = value if value not in tier_of else f"{value}-tier{tier}"
                domain_name[(tier, value)] = name
                tier_of[name], members[name] = tier, set()
            members[name].add(node)
            if below is not None:
                if parent.setdefault(below, name) != name:
                    warnings.add("parents", f"domain {below} lies under both {parent[below]} and {name} "
                                            f"(node {node}); kept under {parent[below]}")
            below = name
    hypernodes = [ResolvedHyperNode(name, tier_of[name], parent.get(name), tuple(sorted(members[name])))
                  for name in sorted(tier_of, key=lambda n: (-tier_of[n], n))]
    return Topology(hypernodes, warnings.messages())
