"""Writing a discovered tree back to its member as Volcano HyperNode objects (opt-in per cluster), so that the
member's own Volcano schedules on the tree the broker places by.

The broker's objects carry its mark (`MANAGED_BY`) and the recipe's name; only those are ever changed or deleted, and
a name another HyperNode holds is left to it. Each object lists its members by exact name: the HyperNodes below it,
and the nodes that join it directly (at the closest tier, or a node missing the tiers below); its status says how
many nodes it holds. `plan` is pure; `write_back` asks the member.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from clusters.member import HYPERNODES, MemberClient
from clusters.system import MANAGED_BY, made_by_us
from clusters.topology import Topology

RECIPE_LABEL = "topology.archipelago.io/recipe"
FIELD_MANAGER = "archipelago-topology"


def desired(topology: Topology, recipe: str) -> dict[str, dict]:
    """The HyperNode objects that describe the tree: name -> body (spec and status)."""
    children: dict[str, list[str]] = {}
    for h in topology.hypernodes:
        if h.parent is not None:
            children.setdefault(h.parent, []).append(h.name)
    by_name = {h.name: h for h in topology.hypernodes}
    out = {}
    for h in topology.hypernodes:
        below = {n for child in children.get(h.name, ()) for n in by_name[child].nodes}
        members = [{"type": "HyperNode", "selector": {"exactMatch": {"name": child}}}
                   for child in sorted(children.get(h.name, ()))]
        members += [{"type": "Node", "selector": {"exactMatch": {"name": node}}}
                    for node in h.nodes if node not in below]
        out[h.name] = {"apiVersion": f"{HYPERNODES.group}/{HYPERNODES.version}", "kind": "HyperNode",
                       "metadata": {"name": h.name, "labels": {**MANAGED_BY, RECIPE_LABEL: recipe}},
                       "spec": {"tier": h.tier, "members": members}, "status": {"nodeCount": len(h.nodes)}}
    return out


@dataclass
class Plan:
    apply: list[dict] = field(default_factory=list)  # create or change (spec, labels)
    status: list[dict] = field(default_factory=list)  # node counts to set
    delete: list[str] = field(default_factory=list)  # the broker's objects no longer in the tree
    taken: list[str] = field(default_factory=list)  # names another HyperNode holds: left to it


def plan(wanted: Mapping[str, dict], existing: Mapping[str, dict]) -> Plan:
    """What to change on the member for its HyperNodes (`existing`, every one it has) to hold `wanted`."""
    out = Plan()
    for name, body in wanted.items():
        current = existing.get(name)
        if current is not None and not made_by_us(current):
            out.taken.append(name)
            continue
        if current is None or current.get("spec") != body["spec"] or \
                (current["metadata"].get("labels") or {}) != body["metadata"]["labels"]:
            out.apply.append(body)
        if current is None or (current.get("status") or {}).get("nodeCount") != body["status"]["nodeCount"]:
            out.status.append(body)
    out.delete = sorted(name for name, obj in existing.items() if made_by_us(obj) and name not in wanted)
    return out


def write_back(client: MemberClient, steps: Plan) -> None:
    """Parents after their children are in place is not needed (Volcano resolves members by name, whenever they
    appear); deletions last. Raises MemberError (the next change or resync tries again)."""
    for body in steps.apply:
        client.apply(HYPERNODES, {k: v for k, v in body.items() if k != "status"}, FIELD_MANAGER)
    for body in steps.status:
        client.apply_status(HYPERNODES, {"apiVersion": body["apiVersion"], "kind": body["kind"],
                                         "metadata": {"name": body["metadata"]["name"]}, "status": body["status"]},
                            FIELD_MANAGER)
    for name in steps.delete:
        client.delete(HYPERNODES, name)
