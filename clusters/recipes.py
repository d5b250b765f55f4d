"""Topology discovery by recipe: a member's HyperNode tree from the fabric labels its cloud or its operator put on
its nodes, for members without HyperNode objects.

A recipe is a list of tiers, closest first; each tier the node label keys that name a node's domain there (the first
a node carries). Built in: our own leaf/spine labels, AWS's `network-node-layer-*`, GKE's block and sub-block, and
NVIDIA's NVLink clique (`nvidia.com/gpu.clique`, set by the GPU operator on GB200/GB300 NVL72 racks); the clique is
the closest tier of each, where nodes carry it. Admins write their own in the shape of Volcano's label discovery.
A tier no node carries is left out (the tiers above move down), so the closest tier a cluster has is tier 1.

`discover` chooses for one cluster: the recipe it is set to, or with `auto` the one whose labels most of its nodes
carry; with none carried, the federation's global list (`ARCHIPELAGO_TOPOLOGY_TIER_LABELS`), the last resort.
Pure: nothing here reads a member or the database.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from clusters.topology import ResolvedHyperNode, Topology, Warnings, derive_from_labels

AUTO = "auto"
CLIQUE = "nvidia.com/gpu.clique"
ZONE = "topology.kubernetes.io/zone"
MAX_TIERS = 8
MAX_KEYS_PER_TIER = 8
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_INVALID = re.compile(r"[^a-z0-9.-]+")


@dataclass(frozen=True)
class Tier:
    keys: tuple[str, ...]  # the label keys naming a node's domain here, the first a node carries wins
    prefix: str  # a derived HyperNode's name: <prefix>-<label value> (or the value alone)


@dataclass(frozen=True)
class Recipe:
    name: str
    tiers: tuple[Tier, ...]  # closest first
    generic: frozenset[str] = frozenset({ZONE})  # keys every recipe may share: they do not say which fabric it is

    def signature(self) -> tuple[str, ...]:
        """The keys that say a node is of this recipe's fabric (`auto`)."""
        return tuple(k for tier in self.tiers for k in tier.keys if k not in self.generic)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "tiers": [list(t.keys) for t in self.tiers]}


def _tier(prefix: str, *keys: str) -> Tier:
    return Tier(tuple(keys), prefix)


BUILT_IN: dict[str, Recipe] = {r.name: r for r in (
    # our own labels' values name their domains already ("leaf-3", "spine-1"): no prefix
    Recipe("archipelago", (_tier("clique", CLIQUE), _tier("", "network.archipelago.io/leaf"),
                           _tier("", "network.archipelago.io/spine"), _tier("", ZONE))),
    Recipe("aws", (_tier("clique", CLIQUE), _tier("layer4", "topology.k8s.aws/network-node-layer-4"),
                   _tier("layer3", "topology.k8s.aws/network-node-layer-3"),
                   _tier("layer2", "topology.k8s.aws/network-node-layer-2"),
                   _tier("layer1", "topology.k8s.aws/network-node-layer-1"), _tier("zone", ZONE))),
    Recipe("gke", (_tier("clique", CLIQUE), _tier("subblock", "cloud.google.com/gce-topology-subblock"),
                   _tier("block", "cloud.google.com/gce-topology-block"), _tier("zone", ZONE))),
    Recipe("nvlink", (_tier("clique", CLIQUE), _tier("zone", ZONE))),
)}


class RecipeError(ValueError):
    """An admin's recipe that cannot be used: says what to fix."""


def parse_recipe(name: str, body: Mapping[str, Any]) -> Recipe:
    """An admin's recipe: `tiers` (a list per tier, closest first, of label keys) or Volcano's `levels` (a list of
    `{nodeLabel: key}` from the highest domain down; a last `kubernetes.io/hostname` names the node, not a tier)."""
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > 40:
        raise RecipeError(f"name: {name!r} is not a lowercase DNS label of at most 40 characters")
    if name in BUILT_IN or name == AUTO:
        raise RecipeError(f"name: {name!r} is built in; choose another")
    tiers, levels = body.get("tiers"), body.get("levels")
    if (tiers is None) == (levels is None):
        raise RecipeError("give either tiers (closest first: a list of label keys per tier) or levels (Volcano's: "
                          "[{nodeLabel: key}, …] from the highest domain down)")
    if levels is not None:
        if not isinstance(levels, list) or not all(isinstance(lv, dict) and isinstance(lv.get("nodeLabel"), str)
                                                   for lv in levels):
            raise RecipeError("levels: a list of {nodeLabel: <label key>}, from the highest domain down")
        keys = [lv["nodeLabel"] for lv in levels]
        if keys and keys[-1] == "kubernetes.io/hostname":
            keys = keys[:-1]  # Volcano's last level names the node itself
        tiers = [[key] for key in reversed(keys)]
    if not isinstance(tiers, list) or not tiers or not all(isinstance(t, list) and t for t in tiers):
        raise RecipeError("tiers: a non-empty list, closest tier first, of non-empty lists of label keys")
    if len(tiers) > MAX_TIERS or any(len(t) > MAX_KEYS_PER_TIER for t in tiers):
        raise RecipeError(f"at most {MAX_TIERS} tiers of {MAX_KEYS_PER_TIER} label keys each")
    seen: set[str] = set()
    parsed = []
    for number, keys in enumerate(tiers, start=1):
        for key in keys:
            if not isinstance(key, str) or len(key) > 317 or not _KEY.match(key):
                raise RecipeError(f"tier {number}: {key!r} is not a label key (prefix/name, as Kubernetes allows)")
            if key in seen:
                raise RecipeError(f"tier {number}: {key} is in another tier too; a key names one tier's domains")
            seen.add(key)
        parsed.append(Tier(tuple(keys), _prefix(keys[0])))
    return Recipe(name, tuple(parsed))


def discover(node_labels: Mapping[str, Mapping[str, str]], choice: str, recipes: Mapping[str, Recipe],
             global_tiers: Sequence[Sequence[str]]) -> tuple[Topology, str]:
    """The tree of a member without HyperNode objects, and its source: `labels:<recipe>`, `labels` (the global list)
    or `none`. `choice`: a recipe's name or `auto`; `recipes`: the admins' (the built-in ones are always known)."""
    known = {**BUILT_IN, **recipes}
    if choice != AUTO:
        recipe = known.get(choice)
        if recipe is None:
            return Topology([], [f"topology recipe {choice} does not exist; the tree is empty until it does"]), "none"
        topology = derive(node_labels, recipe)
        return topology, f"labels:{recipe.name}" if topology.hypernodes else "none"
    recipe = choose(node_labels, known)
    if recipe is not None:
        return derive(node_labels, recipe), f"labels:{recipe.name}"
    topology = derive_from_labels(node_labels, global_tiers)
    return topology, "labels" if topology.hypernodes else "none"


def choose(node_labels: Mapping[str, Mapping[str, str]], recipes: Mapping[str, Recipe]) -> Recipe | None:
    """`auto`: the recipe whose own labels most nodes carry; then the one more of their labels match; then the one
    that finds more tiers; then the one with the fewest own keys no node carries (the most specific: a clique alone
    is `nvlink`, not every recipe that starts with a clique tier); then by name. None when no node carries any
    recipe's own labels."""
    best: tuple | None = None
    for recipe in recipes.values():
        signature = recipe.signature()
        nodes = hits = 0
        carried: set[str] = set()
        for labels in node_labels.values():
            present = [k for k in signature if labels.get(k)]
            nodes += bool(present)
            hits += len(present)
            carried.update(k for k in labels if labels[k])
        if nodes:
            tiers = sum(1 for tier in recipe.tiers if carried.intersection(tier.keys))
            key = (-nodes, -hits, -tiers, len(set(signature) - carried), recipe.name)
            if best is None or key < best[0]:
                best = (key, recipe)
    return best[1] if best else None


def derive(node_labels: Mapping[str, Mapping[str, str]], recipe: Recipe) -> Topology:
    """One HyperNode per distinct domain at each tier the nodes carry (tiers none carries are left out, the ones
    above move down), named `<prefix>-<value>` (a valid object name: `hypernode_name`). A node that lacks a tier
    others carry joins at the tiers it has, with a warning; a domain whose nodes name two parents keeps the first."""
    warnings = Warnings()
    carried = [tier for tier in recipe.tiers if any(_value(labels, tier) for labels in node_labels.values())]
    signature = recipe.signature()
    if node_labels and signature and not any(labels.get(k) for labels in node_labels.values() for k in signature):
        warnings.add("recipe", f"no node carries a label of recipe {recipe.name} ({', '.join(signature)}): only "
                               f"{'its zones are' if carried else 'nothing is'} found")
    members: dict[str, set[str]] = {}
    tier_of: dict[str, int] = {}
    parent: dict[str, str] = {}
    names: dict[tuple[int, str], str] = {}
    for node in sorted(node_labels):
        labels = node_labels[node]
        below: str | None = None
        missing: list[str] = []
        for number, tier in enumerate(carried, start=1):
            value = _value(labels, tier)
            if value is None:
                missing.append(f"{' or '.join(tier.keys)} (tier {number})")
                continue
            name = names.get((number, value))
            if name is None:
                name = base = hypernode_name(tier.prefix, value)
                suffix = 1
                while name in tier_of:  # another domain has it: <name>-tier<N>, then -tier<N>-2, …
                    name = f"{base}-tier{number}" + (f"-{suffix}" if suffix > 1 else "")
                    suffix += 1
                names[(number, value)], tier_of[name], members[name] = name, number, set()
            members[name].add(node)
            if below is not None and parent.setdefault(below, name) != name:
                warnings.add("parents", f"domain {below} lies under both {parent[below]} and {name} (node {node}); "
                                        f"kept under {parent[below]}")
            below = name
        if missing and len(missing) < len(carried):
            warnings.add("partial", f"node {node} has no {', '.join(missing)} label of recipe {recipe.name}: it "
                                    f"joins the tree at the tiers it has")
    hypernodes = [ResolvedHyperNode(name, tier_of[name], parent.get(name), tuple(sorted(members[name])))
                  for name in sorted(tier_of, key=lambda n: (-tier_of[n], n))]
    return Topology(hypernodes, warnings.messages())


def hypernode_name(prefix: str, value: str) -> str:
    """`<prefix>-<value>` as an object name may be (a DNS subdomain, lowercase): characters it may not hold become
    `-`, and a name that had to change or is too long ends in a hash of the value, so two values never share one."""
    name = f"{prefix}-{value}" if prefix else value
    cleaned = _INVALID.sub("-", name.lower()).strip("-.")
    if cleaned == name and len(name) <= 63:
        return name
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    return f"{cleaned[:54].rstrip('-.')}-{digest}"


def _value(labels: Mapping[str, str], tier: Tier) -> str | None:
    return next((labels[k] for k in tier.keys if labels.get(k)), None)


def _prefix(key: str) -> str:
    """An admin's tier's name prefix: its first key's name, e.g. `tor` for `volcano.sh/tor`."""
    return _INVALID.sub("-", key.rpartition("/")[2].lower()).strip("-.") or "tier"
