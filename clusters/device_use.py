"""What a node's DRA devices hold, in the placement engine's terms: for each pod device demand some job made (its
`DeviceDemand.key`), how many such pods the node's devices take at once (`allocatable`, a pod counting 1000 milli),
how many of those the devices held now take away (`used`), and the part each of the broker's placements holds
(`placement_used`); and for each device-class quota resource (an admin's mapping), the devices of those classes.

The engine then fits pods with claims as it fits pods with extended resources: a pod of demand K asks for 1000 of K.
Counting by demand, not by device, keeps what one pod needs together: two 3g.40gb slices and one 1g.10gb on one GPU
fit a pod only if the GPU's counters allow the three at once, which counting each profile apart would not see.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping, Sequence

from clusters.rules.allocation import NodeDevices, counters_of, device_of
from clusters.rules.dra import UNIT, DeviceDemand


def device_use(devices: Mapping[str, Mapping[str, Any]], counter_sets: Mapping[str, Mapping[str, Any]],
               classes: Mapping[str, Mapping[str, Any]], shapes: Mapping[str, DeviceDemand],
               mappings: Mapping[str, Sequence[str]]) -> dict[str, dict[str, Any]]:
    """Per node with devices: {"allocatable", "used", "placement_used"} over demand keys and quota resources.
    `devices`, `counter_sets` and `classes` are inventory rows (`clusters.rules.devices`); a device's `allocated_by` says it
    is held, its `held_for` by which of the broker's placements."""
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for row in devices.values():
        if row.get("node"):
            by_node.setdefault(row["node"], []).append(row)
    counters = counters_of(counter_sets)
    selectors = {name: tuple(row.get("selectors") or ()) for name, row in classes.items()}
    context = (tuple(sorted((k, repr(d)) for k, d in shapes.items())), repr(sorted(selectors.items())),
               repr(sorted((k, sorted(v)) for k, v in mappings.items())))
    out = {}
    for node, rows in sorted(by_node.items()):
        key = _signature(rows, counters, context)
        with _LOCK:  # members are synced by several threads at once
            use = _COUNTED.pop(key, None)
        if use is None:
            use = _node_use(rows, counters, selectors, shapes, mappings)
        with _LOCK:
            _COUNTED[key] = use  # the newest last: the oldest go first when the cache is full
            while len(_COUNTED) > COUNTED_KEPT:
                del _COUNTED[next(iter(_COUNTED))]
        out[node] = use
    return out


# Counts of nodes alike (the same devices, counters, holds and holders, their own names left out), kept across
# calls: a member's sync counts again only the nodes whose devices changed, and a fleet of identical nodes is
# counted once. The values are never changed in place.
COUNTED_KEPT = 50_000
_COUNTED: dict[str, dict[str, Any]] = {}
_LOCK = threading.Lock()


def _signature(rows: list[Mapping[str, Any]], counters: Mapping[str, Mapping[str, int]], context: tuple) -> str:
    sets = {f"{row['driver']}/{row['pool']}/{c.get('counter_set')}" for row in rows for c in row.get("consumes") or ()}
    return repr((context, sorted((row["device"], repr(row.get("attributes")), repr(row.get("capacity")),
                                  repr(row.get("consumes")), repr(row.get("taints")), bool(row.get("allocated_by")),
                                  sorted(map(str, row.get("held_for") or ()))) for row in rows),
                 sorted((name.rsplit("/", 1)[1], sorted(counters.get(name, {}).items())) for name in sets)))


def _node_use(rows: list[Mapping[str, Any]], counters: Mapping[str, Mapping[str, int]],
              classes: Mapping[str, Sequence[str]], shapes: Mapping[str, DeviceDemand],
              mappings: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    devices = [device_of(row) for row in rows]
    mine = {s for d in devices for s, _ in d.consumes}
    counters = {s: amounts for s, amounts in counters.items() if s in mine}
    held = {device_of(r).id for r in rows if r.get("allocated_by")}
    by_placement: dict[str, set[str]] = {}
    for row, device in zip(rows, devices):
        for placement in row.get("held_for") or ():
            by_placement.setdefault(str(placement), set()).add(device.id)
    empty = NodeDevices(devices, counters, classes)
    now = NodeDevices(devices, counters, classes, held)
    allocatable: dict[str, int] = {}
    used: dict[str, int] = {}
    placement_used: dict[str, dict[str, int]] = {}
    for key, demand in shapes.items():
        room = empty.room(demand)
        if not room:
            continue
        left = now.room(demand)
        allocatable[key], used[key] = room * UNIT, (room - left) * UNIT
        for placement, theirs in by_placement.items():
            without = NodeDevices(devices, counters, classes, held - theirs).room(demand)
            if without > left:
                placement_used.setdefault(placement, {})[key] = (without - left) * UNIT
    for resource, names in mappings.items():
        of_class = [d for d in devices if any(empty.in_class(d, name) for name in names)]
        if not of_class:
            continue
        allocatable[resource] = len(of_class) * UNIT
        used[resource] = sum(d.id in held for d in of_class) * UNIT
        for placement, theirs in by_placement.items():
            count = sum(d.id in theirs for d in of_class)
            if count:
                placement_used.setdefault(placement, {})[resource] = count * UNIT
    return {"allocatable": allocatable, "used": used, "placement_used": placement_used}
