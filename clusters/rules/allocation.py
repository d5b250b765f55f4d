"""Allocating a pod's device requests on one node, as the kube-scheduler's DRA plugin does, and counting how many
pods of one demand a node's devices hold: shared by the simulator (which allocates claims when it binds a pod) and the
broker's inventory (which counts each demand's room per node), so that both agree on what fits.

A device is free when no claim holds it; it fits an alternative when it matches the DeviceClass's selectors and the
request's, its NoSchedule/NoExecute taints are tolerated, and the counters it consumes are left in their shared sets
(a MIG slice takes compute and memory slices of its GPU; the whole GPU takes them all). `All` takes every matching
device of the node, and fails if one is held. The search is greedy, request by request, with the tightest counter set
first (MIG slices pack onto a GPU already cut before a whole one is cut): it can miss an allocation the kube-scheduler's
backtracking finds, never claim one it would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from clusters.rules.dra import SELECTORS, Alternative, CelDevice, DeviceDemand, Selectors
from clusters.rules.quantity import to_milli
from clusters.rules.taints import untolerated

MAX_PODS_COUNTED = 256  # a node's room for one demand is counted up to this


@dataclass(frozen=True, slots=True)
class Device:
    id: str  # driver/pool/device
    driver: str
    node: str | None
    cel: CelDevice
    attributes: Mapping[str, Any]  # by qualified name (domain/name), for matchAttribute
    consumes: tuple[tuple[str, Mapping[str, int]], ...] = ()  # (counter set driver/pool/set, counters in milli)
    taints: tuple[Mapping[str, Any], ...] = ()


def device_of(row: Mapping[str, Any]) -> Device:
    """A device from its inventory row (`clusters.rules.devices`), or from a simulated ResourceSlice's device alike."""
    driver, pool = row["driver"], row["pool"]
    attributes = row.get("attributes") or {}
    consumes = [(f"{driver}/{pool}/{entry.get('counter_set')}", _milli(entry.get("counters")))
                for entry in row.get("consumes") or ()]
    return Device(f"{driver}/{pool}/{row['device']}", driver, row.get("node"),
                  CelDevice.of(driver, attributes, row.get("capacity") or {}),
                  {(k if "/" in k else f"{driver}/{k}"): v for k, v in attributes.items()},
                  tuple(consumes), tuple(row.get("taints") or ()))


def counters_of(counter_sets: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Counter sets (driver/pool/set -> {"counters": {name: quantity}}) in milli-units."""
    return {name: _milli(row.get("counters")) for name, row in counter_sets.items()}


def _milli(counters: Mapping[str, Any] | None) -> dict[str, int]:
    """Counters in milli-units; one that is not a quantity is left out (a member's report is untrusted)."""
    out = {}
    for name, value in (counters or {}).items():
        try:
            out[name] = to_milli(value)
        except ValueError:
            continue
    return out


class NodeDevices:
    """A node's devices, which are held, and the counters left: `allocate` takes a pod's devices from it."""

    def __init__(self, devices: Sequence[Device], counters: Mapping[str, Mapping[str, int]],
                 classes: Mapping[str, Sequence[str]], held: Iterable[str] = (), selectors: Selectors = SELECTORS):
        self.devices, self.classes, self.selectors = sorted(devices, key=lambda d: d.id), classes, selectors
        self.counters = {name: dict(amounts) for name, amounts in counters.items()}
        self.held: set[str] = set()
        by_id = {d.id: d for d in self.devices}
        for device_id in held:
            if device_id in by_id and device_id not in self.held:
                self._take(by_id[device_id])

    def copy(self) -> NodeDevices:
        twin = object.__new__(NodeDevices)
        twin.devices, twin.classes, twin.selectors = self.devices, self.classes, self.selectors
        twin.counters = {name: dict(amounts) for name, amounts in self.counters.items()}
        twin.held = set(self.held)
        return twin

    def _take(self, device: Device) -> None:
        self.held.add(device.id)
        for counter_set, amounts in device.consumes:
            left = self.counters.setdefault(counter_set, {})
            for name, amount in amounts.items():
                left[name] = left.get(name, 0) - amount

    def _counters_left(self, device: Device) -> bool:
        for counter_set, amounts in device.consumes:
            left = self.counters.get(counter_set)
            if left is None or any(left.get(name, 0) < amount for name, amount in amounts.items()):
                return False
        return True

    def in_class(self, device: Device, device_class: str) -> bool:
        """Does the member's DeviceClass select the device? A class the member does not have selects nothing."""
        class_selectors = self.classes.get(device_class)
        return class_selectors is not None and all(self.selectors.matches(e, device.cel) for e in class_selectors)

    def _selected(self, device: Device, alternative: Alternative) -> bool:
        return (self.in_class(device, alternative.device_class)
                and all(self.selectors.matches(e, device.cel) for e in alternative.selectors)
                and not untolerated(device.taints, alternative.tolerations))

    def _tightness(self, device: Device) -> tuple:
        """Devices whose counter sets have least left come first: slices fill a GPU already cut."""
        left = sum(sum(self.counters.get(s, {}).values()) for s, _ in device.consumes)
        return (left, device.id)

    def allocate(self, demand: DeviceDemand) -> list[tuple[str, Device]] | None:
        """Take devices for every request of `demand`, or None, taking nothing: (its request as "claim/name", or
        "claim/name/subrequest" for a firstAvailable choice, device)."""
        trial = self.copy()
        fixed: dict[int, Any] = {}  # matchAttribute constraint -> the value its first device set
        chosen: list[tuple[str, Device]] = []
        for request in demand.requests:
            request_id = f"{request.claim}/{request.name}"
            constraints = [i for i, (only, _) in enumerate(demand.match_attributes) if _applies(only, request_id)]
            for alternative in request.alternatives:
                picked = trial._pick(alternative, constraints, demand, fixed)
                if picked is not None:
                    for device in picked:
                        trial._take(device)
                        for i in constraints:
                            fixed.setdefault(i, device.attributes.get(demand.match_attributes[i][1]))
                    taken = f"{request_id}/{alternative.name}" if alternative.name else request_id
                    chosen += [(taken, device) for device in picked]
                    break
            else:
                return None
        self.counters, self.held = trial.counters, trial.held
        return chosen

    def _pick(self, alternative: Alternative, constraints: list[int], demand: DeviceDemand,
              fixed: Mapping[int, Any]) -> list[Device] | None:
        matching = [d for d in self.devices if self._selected(d, alternative)]
        if alternative.all:
            if not matching or any(d.id in self.held for d in matching):
                return None
            picked, trial = [], self.copy()
            for device in matching:
                if not trial._counters_left(device) or not _agrees(device, constraints, demand, fixed):
                    return None
                trial._take(device)
                picked.append(device)
            return picked
        picked, trial, agreed = [], self.copy(), dict(fixed)
        for device in sorted((d for d in matching if d.id not in self.held), key=self._tightness):
            if len(picked) == alternative.count:
                break
            if trial._counters_left(device) and _agrees(device, constraints, demand, agreed):
                trial._take(device)
                picked.append(device)
                for i in constraints:
                    agreed.setdefault(i, device.attributes.get(demand.match_attributes[i][1]))
        return picked if len(picked) == alternative.count else None

    def room(self, demand: DeviceDemand, limit: int = MAX_PODS_COUNTED) -> int:
        """How many pods of `demand` these devices hold at once, besides what is held now."""
        trial, pods = self.copy(), 0
        while pods < limit and trial.allocate(demand) is not None:
            pods += 1
        return pods


def _applies(only: Sequence[str], request_id: str) -> bool:
    return any(request_id == name or (name.endswith("/") and request_id.startswith(name)) for name in only)


def _agrees(device: Device, constraints: list[int], demand: DeviceDemand, fixed: Mapping[int, Any]) -> bool:
    for i in constraints:
        value = device.attributes.get(demand.match_attributes[i][1])
        if value is None or (i in fixed and fixed[i] != value):
            return False
    return True
