"""A member's devices as Dynamic Resource Allocation (`resource.k8s.io/v1`, GA in Kubernetes 1.34) describes them:
its DeviceClasses, the devices its drivers publish in ResourceSlices, the counter sets partitionable devices share,
and which devices existing ResourceClaims hold, whoever made them. Rows for the inventory; pure.

A pool (driver, pool name) may span several slices: only its newest generation counts (a driver rewriting a pool
bumps it), and a pool whose newest generation has fewer slices than it says is being rewritten — kept, with a
warning. A device is named by (driver, pool, device): its row's name is `driver/pool/device`. Every value a member
reports is untrusted: a malformed slice, device or claim is skipped with a warning, never a failed sync.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from clusters.rules.warnings import Warnings

# the broker's label on its placements' pods and on the claims its templates make (clusters.claim_templates)
PLACEMENT_ID_LABEL = "archipelago.io/placement-id"


@dataclass
class DeviceInventory:
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)  # driver/pool/device -> row
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> row
    counter_sets: dict[str, dict[str, Any]] = field(default_factory=dict)  # driver/pool/set -> row
    warnings: list[str] = field(default_factory=list)


def device_inventory(slices: Iterable[Mapping], claims: Iterable[Mapping], classes: Iterable[Mapping]) -> DeviceInventory:
    out, warnings = DeviceInventory(), Warnings()
    newest: dict[tuple[str, str], tuple[int, int, list[Mapping]]] = {}  # pool -> (generation, slice count, slices)
    for obj in slices:
        spec = obj.get("spec") if isinstance(obj, Mapping) else None
        pool = spec.get("pool") if isinstance(spec, Mapping) else None
        if not isinstance(pool, Mapping) or not isinstance(spec.get("driver"), str) or \
                not isinstance(pool.get("name"), str) or not isinstance(pool.get("generation"), int):
            warnings.add("slice", f"ResourceSlice {_name(obj)} has no driver, pool name or pool generation: skipped")
            continue
        key = (spec["driver"], pool["name"])
        generation, count = pool["generation"], pool.get("resourceSliceCount") or 1
        if key not in newest or generation > newest[key][0]:
            newest[key] = (generation, count if isinstance(count, int) else 1, [spec])
        elif generation == newest[key][0]:
            newest[key][2].append(spec)
    for (driver, pool), (generation, count, specs) in sorted(newest.items()):
        if len(specs) < count:
            warnings.add("pool", f"pool {pool} of {driver} has {len(specs)} of its {count} ResourceSlices at "
                                 f"generation {generation}: its driver is rewriting it")
        for spec in specs:
            _add_slice(out, warnings, driver, pool, generation, spec)
    for obj in claims:
        _add_claim(out, warnings, obj)
    for obj in classes:
        name = _mapping(_mapping(obj).get("metadata")).get("name")
        selectors = _mapping(_mapping(obj).get("spec")).get("selectors") or []
        if not isinstance(name, str) or not isinstance(selectors, list):
            warnings.add("class", f"DeviceClass {_name(obj)} is malformed: skipped")
            continue
        expressions = [_mapping(_mapping(s).get("cel")).get("expression") for s in selectors]
        out.classes[name] = {"selectors": [e for e in expressions if isinstance(e, str)]}
    out.warnings = warnings.messages()
    return out


def _add_slice(out: DeviceInventory, warnings: Warnings, driver: str, pool: str, generation: int,
               spec: Mapping) -> None:
    node = spec.get("nodeName") if isinstance(spec.get("nodeName"), str) else None
    for counter_set in _list(spec.get("sharedCounters")):
        if isinstance(counter_set, Mapping) and isinstance(counter_set.get("name"), str):
            out.counter_sets[f"{driver}/{pool}/{counter_set['name']}"] = {
                "driver": driver, "pool": pool, "counters": _quantities(counter_set.get("counters"))}
    for device in _list(spec.get("devices")):
        name = device.get("name") if isinstance(device, Mapping) else None
        if not isinstance(name, str):
            warnings.add("device", f"a device of pool {pool} of {driver} has no name: skipped")
            continue
        out.devices[f"{driver}/{pool}/{name}"] = {
            "driver": driver, "pool": pool, "device": name, "generation": generation,
            "node": device.get("nodeName") if isinstance(device.get("nodeName"), str) else node,
            "attributes": {k: _attribute(v) for k, v in _mapping(device.get("attributes")).items()
                           if isinstance(v, Mapping)},
            "capacity": {k: str(v.get("value")) for k, v in _mapping(device.get("capacity")).items()
                         if isinstance(v, Mapping) and v.get("value") is not None},
            "consumes": [{"counter_set": c.get("counterSet"), "counters": _quantities(c.get("counters"))}
                         for c in _list(device.get("consumesCounters")) if isinstance(c, Mapping)],
            "taints": [{k: t[k] for k in ("key", "value", "effect") if k in t}
                       for t in _list(device.get("taints")) if isinstance(t, Mapping)],
            "allocated_by": [], "held_for": []}


def _add_claim(out: DeviceInventory, warnings: Warnings, obj: Mapping) -> None:
    """The devices a claim's allocation holds (any claim: the broker's tenants', or another workload's)."""
    meta = _mapping(_mapping(obj).get("metadata"))
    claim = f"{meta.get('namespace')}/{meta.get('name')}"
    # made from a template the broker sent (`clusters.jobsets.claim_templates`): its placement's, counted with it
    placement = _mapping(meta.get("labels")).get(PLACEMENT_ID_LABEL)
    allocation = _mapping(_mapping(_mapping(obj).get("status")).get("allocation"))
    for result in _list(_mapping(allocation.get("devices")).get("results")):
        if not isinstance(result, Mapping):
            continue
        key = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
        if key in out.devices:
            out.devices[key]["allocated_by"].append(claim)
            if isinstance(placement, str) and placement not in out.devices[key]["held_for"]:
                out.devices[key]["held_for"].append(placement)
        else:
            warnings.add("claim", f"ResourceClaim {claim} holds {key}, which no ResourceSlice publishes")


def _attribute(value: Mapping) -> Any:
    """A device attribute's value: exactly one of int, bool, string, version."""
    for kind in ("int", "bool", "string", "version"):
        if kind in value:
            return value[kind]
    return None


def _quantities(counters: Any) -> dict[str, str]:
    return {k: str(v.get("value")) for k, v in (counters or {}).items() if isinstance(v, Mapping)} \
        if isinstance(counters, Mapping) else {}


def _mapping(value: Any) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _name(obj: Any) -> str:
    return str(_mapping(_mapping(obj).get("metadata")).get("name") or "?")
