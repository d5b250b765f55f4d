"""The allocator the simulator's scheduler and the broker's inventory share (clusters.rules.allocation): named cases,
and generated ones that no allocation ever takes a device twice or more of a GPU's counters than it has."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from clusters.device_use import device_use
from clusters.rules.allocation import NodeDevices, counters_of, device_of
from clusters.rules.devices import device_inventory
from clusters.rules.dra import ClaimError, DeviceDemand, check_template, pod_demand
from clusters.sim.scenario import device_classes, resource_slice

DRIVER = "gpu.nvidia.com"


def node(devices: dict, name: str = "n1", extra_classes: dict | None = None) -> tuple[NodeDevices, object]:
    slices = [resource_slice(name, devices)]
    inventory = device_inventory(slices, [], device_classes(slices, extra_classes))
    classes = {n: tuple(row["selectors"]) for n, row in inventory.classes.items()}
    return NodeDevices([device_of(r) for r in inventory.devices.values()], counters_of(inventory.counter_sets),
                       classes), inventory


def demand(*requests: dict, constraints: list | None = None) -> DeviceDemand:
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "t"},
                "spec": {"spec": {"devices": {"requests": list(requests), "constraints": constraints or []}}}}
    return pod_demand({"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "t"}]},
                      {"t": check_template(template, "t")}, "spec")


def exactly(name: str, device_class: str, count: int = 1, **extra) -> dict:
    return {"name": name, "exactly": {"deviceClassName": device_class, "count": count, **extra}}


MIG = {"driver": DRIVER, "count": 2, "mig": ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"],
       "attributes": {"productName": "NVIDIA A100"}}
SLICE = {p: f"mig-{p}.{DRIVER}" for p in ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")}


@pytest.mark.parametrize("requests, pods", [
    ([exactly("a", SLICE["3g.40gb"], 2), exactly("b", SLICE["1g.10gb"])], 2),  # 7 of 7 compute slices a GPU
    # 8 of a GPU's 7: one pod, its slices on both GPUs; then no GPU has two 3g.40gb left
    ([exactly("a", SLICE["3g.40gb"], 2), exactly("b", SLICE["1g.10gb"], 2)], 1),
    ([exactly("a", SLICE["7g.80gb"])], 2),  # a whole GPU each
    ([exactly("a", SLICE["1g.10gb"])], 14),
    ([exactly("a", SLICE["2g.20gb"]), exactly("b", SLICE["1g.10gb"])], 4),  # 3 a pod, 2 a GPU (2+1 ×2 = 6, 1 left)
    ([{"name": "a", "exactly": {"deviceClassName": SLICE["1g.10gb"], "allocationMode": "All"}}], 1),  # all, once
])
def test_mig_mixes_fit_as_the_counters_allow(requests, pods):
    devices, _ = node(MIG)
    assert devices.room(demand(*requests)) == pods


def test_a_whole_gpu_held_leaves_its_slices_none_and_the_other_gpu_all():
    devices, inventory = node(MIG)
    held = next(name for name in inventory.devices if "gpu-0-mig-7g" in name)
    busy = NodeDevices([device_of(r) for r in inventory.devices.values()], counters_of(inventory.counter_sets),
                       {n: tuple(r["selectors"]) for n, r in inventory.classes.items()}, [held])
    assert busy.room(demand(exactly("a", SLICE["1g.10gb"]))) == 7
    assert devices.room(demand(exactly("a", SLICE["1g.10gb"]))) == 14


def test_first_available_takes_the_first_alternative_that_fits():
    devices, _ = node({"driver": DRIVER, "count": 4, "attributes": {"productName": "NVIDIA H100"}},
                      extra_classes={"h100": f'device.attributes["{DRIVER}"].productName == "NVIDIA H100"'})
    choice = demand({"name": "g", "firstAvailable": [{"name": "eight", "deviceClassName": DRIVER, "count": 8},
                                                      {"name": "two", "deviceClassName": "h100", "count": 2}]})
    allocation = devices.allocate(choice)
    assert [request for request, _ in allocation] == ["c/g/two", "c/g/two"]
    assert devices.room(choice) == 1  # two of the four are taken now


def test_selectors_taints_and_match_attribute():
    devices, _ = node({"driver": DRIVER, "count": 2, "attributes": {"productName": "NVIDIA H100"},
                       "capacity": {"memory": "80Gi"},
                       "taints": [{"key": "maintenance", "value": "soon", "effect": "NoSchedule"}]})
    big = exactly("g", DRIVER, selectors=[{"cel": {"expression": f'device.capacity["{DRIVER}"].memory'
                                                                   f'.compareTo(quantity("40Gi")) >= 0'}}])
    assert devices.room(demand(big)) == 0  # tainted
    tolerated = {**big, "exactly": {**big["exactly"], "tolerations": [{"key": "maintenance", "operator": "Exists"}]}}
    assert devices.room(demand(tolerated)) == 2
    small = {**tolerated, "exactly": {**tolerated["exactly"], "selectors": [
        {"cel": {"expression": f'device.capacity["{DRIVER}"].memory.isLessThan(quantity("40Gi"))'}}]}}
    assert devices.room(demand(small)) == 0
    missing = {**tolerated, "exactly": {**tolerated["exactly"], "selectors": [
        {"cel": {"expression": f'device.attributes["{DRIVER}"].nothing == "x"'}}]}}
    assert devices.room(demand(missing)) == 0  # an expression that fails on a device does not select it
    paired = demand({**tolerated, "exactly": {**tolerated["exactly"], "count": 2}},
                    constraints=[{"matchAttribute": f"{DRIVER}/productName"}])
    assert devices.room(paired) == 1
    unmatched = demand({**tolerated, "exactly": {**tolerated["exactly"], "count": 2}},
                       constraints=[{"matchAttribute": f"{DRIVER}/uuid"}])
    assert devices.room(unmatched) == 0  # no device has the attribute


@pytest.mark.parametrize("request_, words", [
    (exactly("g", DRIVER, selectors=[{"cel": {"expression": "device.driver =="}}]), "is not CEL"),
    (exactly("g", DRIVER, count=0), "whole number from 1 to 128"),
    (exactly("G", DRIVER), "must be a DNS label"),
    ({"name": "g", "firstAvailable": []}, "1 to 8 alternatives"),
    (exactly("g", "Not_A_Class"), "must name a DeviceClass"),
])
def test_templates_are_checked_as_the_api_server_checks_them(request_, words):
    with pytest.raises(ClaimError) as refused:
        demand(request_)
    assert words in str(refused.value)


profiles = st.lists(st.sampled_from(list(SLICE.values())), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(profiles, st.integers(1, 3)), min_size=1, max_size=6))
def test_no_allocation_takes_a_device_twice_or_more_counters_than_a_gpu_has(pods):
    devices, _ = node(MIG)
    taken: list[str] = []
    for classes, count in pods:
        allocation = devices.allocate(demand(*(exactly(f"r{i}", c, count) for i, c in enumerate(classes))))
        if allocation is not None:
            taken += [device.id for _, device in allocation]
    assert len(taken) == len(set(taken))
    assert all(amount >= 0 for counters in devices.counters.values() for amount in counters.values())


def test_the_inventory_counts_pods_and_classes_per_node_and_what_a_placement_holds():
    slices = [resource_slice(n, MIG) for n in ("n1", "n2")]
    inventory = device_inventory(slices, [], device_classes(slices))
    one = demand(exactly("a", SLICE["3g.40gb"], 2), exactly("b", SLICE["1g.10gb"]))
    shapes = one.counted()
    held = [name for name in inventory.devices if name.startswith(f"{DRIVER}/n1/gpu-0-mig-7g")]
    for name in held:
        inventory.devices[name]["allocated_by"], inventory.devices[name]["held_for"] = ["ml/x"], ["42"]
    use = device_use(inventory.devices, inventory.counter_sets, inventory.classes, shapes, {})
    assert use["n2"]["allocatable"][one.key] == 2000 and use["n2"]["used"][one.key] == 0
    assert use["n1"]["used"][one.key] == 1000  # one GPU of two is placement 42's whole
    assert use["n1"]["placement_used"] == {"42": {one.key: 1000, f"devices.archipelago.io/{SLICE['3g.40gb']}": 2000,
                                                  f"devices.archipelago.io/{SLICE['1g.10gb']}": 7000}}
