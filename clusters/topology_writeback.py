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

from clusters.member import HYPERNODES, MemberClient, MemberError
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
    create: list[dict] = field(default_factory=list)  # new: created, never applied (a name taken meanwhile is left)
    apply: list[dict] = field(default_factory=list)  # the broker's own, changed (spec, labels)
    status: list[dict] = field(default_factory=list)  # node counts to set
    delete: list[tuple[str, str | None]] = field(default_factory=list)  # (name, uid): the broker's, not in the tree
    taken: list[str] = field(default_factory=list)  # names another HyperNode holds: left to it


def plan(wanted: Mapping[str, dict], existing: Mapping[str, dict]) -> Plan:
    """What to change on the member for its HyperNodes (`existing`, every one it has) to hold `wanted`."""
    out = Plan()
    for name, body in wanted.items():
        current = existing.get(name)
        if current is not None and not made_by_us(current):
            out.taken.append(name)
            continue
        if current is None:
            out.create.append(body)
        elif current.get("spec") != body["spec"] or (current["metadata"].get("labels") or {}) != \
                body["metadata"]["labels"]:
            out.apply.append(body)
        if current is None or (current.get("status") or {}).get("nodeCount") != body["status"]["nodeCount"]:
            out.status.append(body)
    out.delete = sorted((name, obj["metadata"].get("uid")) for name, obj in existing.items()
                        if made_by_us(obj) and name not in wanted)
    return out


def write_back(client: MemberClient, steps: Plan) -> None:
    """New objects are created (a name another writer took meanwhile stays theirs), the broker's own applied, their
    status set, and the broker's gone from the tree deleted while they are still the object it saw (its uid); an
    object already gone is fine. Volcano resolves members by name whenever they appear: no order is needed. Raises
    MemberError (the next change or resync tries again)."""
    created = set()
    for body in steps.create:
        try:
            client.create(HYPERNODES, {k: v for k, v in body.items() if k != "status"})
            created.add(body["metadata"]["name"])
        except MemberError as exc:
            if exc.reason != "AlreadyExists":
                raise
    for body in steps.apply:
        client.apply(HYPERNODES, {k: v for k, v in body.items() if k != "status"}, FIELD_MANAGER)
    for body in steps.status:
        if body in steps.create and body["metadata"]["name"] not in created:
            continue
        client.apply_status(HYPERNODES, {"apiVersion": body["apiVersion"], "kind": body["kind"],
                                         "metadata": {"name": body["metadata"]["name"]}, "status": body["status"]},
                            FIELD_MANAGER)
    for name, uid in steps.delete:
        try:
            client.delete(HYPERNODES, name, uid=uid)
        except MemberError as exc:
            if exc.reason not in ("NotFound", "Conflict"):  # gone already, or no longer the object the broker made
                raise


def remove_ours(client: MemberClient) -> int:
    """Delete every HyperNode the broker wrote on the member (a cluster removed or unjoined: nothing would keep them
    true any more); how many. Raises MemberError."""
    if not client.serves(HYPERNODES.group, HYPERNODES.version, HYPERNODES.plural):
        return 0
    selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
    ours = [obj for obj in client.list(HYPERNODES, label_selector=selector)[0] if made_by_us(obj)]
    write_back(client, Plan(delete=[(obj["metadata"]["name"], obj["metadata"].get("uid")) for obj in ours]))
    return len(ours)
