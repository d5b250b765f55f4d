"""A member's devices in the inventory (issue #47, its first part), on simulated members over real HTTPS: the
DeviceClasses and the ResourceSlices its drivers publish, kept by list and by watch; the devices another workload's
ResourceClaim holds; a pool's newest generation only; a member older than DRA keeping to extended resources."""

from __future__ import annotations

import copy
from typing import Iterator

import pytest
from hypothesis import given, settings, strategies as st

from clusters import access
from clusters.rules.devices import device_inventory
from clusters.sim.resources import NAMESPACES, RESOURCECLAIMS, RESOURCESLICES
from clusters.sim.testing import SimHandle, running_simulator
from tests.clusters.conftest import TOKEN, register

H100 = {"driver": "gpu.nvidia.com", "count": 4, "attributes": {"productName": "NVIDIA H100 80GB HBM3", "index": 0},
        "capacity": {"memory": "80Gi"}}
SCENARIO = {
    "defaults": {"node": {"cpu": "64", "memory": "512Gi"}, "topology": {"leaf": 2, "spine": 1}, "token": TOKEN},
    "clusters": [
        {"name": "dra", "nodes": 2, "devices": H100, "version": "v1.34.1"},
        {"name": "old", "nodes": 2, "node": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
         "version": "v1.31.4"},  # no resource.k8s.io/v1: GPUs as an extended resource
    ],
}


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    with running_simulator(SCENARIO) as handle:
        yield handle


def devices(api, cluster: str) -> dict:
    answer = api.get(f"/api/v1/clusters/{cluster}/devices")
    assert answer.status_code == 200, answer.text
    return answer.json()


def claim(name: str, node: str, *gpus: int) -> dict:
    """A ResourceClaim another workload made, allocated by the member's scheduler to `gpus` of `node`."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                           "count": len(gpus)}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node, "device": f"gpu-{i}"} for i in gpus]}}}}


def test_the_device_classes_and_devices_a_member_publishes_are_in_the_inventory(api, sim):
    register(api, sim, "dra")
    found = devices(api, "dra")
    assert found["classes"] == [{"name": "gpu.nvidia.com", "selectors": ['device.driver == "gpu.nvidia.com"']}]
    assert found["drivers"] == {"gpu.nvidia.com": {"devices": 8, "allocated": 0}}
    first = found["devices"][0]
    assert first == {"driver": "gpu.nvidia.com", "pool": "node-00", "name": "gpu-0", "node": "node-00",
                     "attributes": {"productName": "NVIDIA H100 80GB HBM3", "index": 0},
                     "capacity": {"memory": "80Gi"}, "consumes_counters": [], "taints": [], "allocated_by": []}
    assert {(d["node"], d["name"]) for d in found["devices"]} == {(f"node-0{n}", f"gpu-{i}")
                                                                 for n in range(2) for i in range(4)}
    assert api.get("/api/v1/clusters/dra").json()["devices"] == found["drivers"]


def test_another_workloads_claim_holds_devices_and_syncs_follow_claims_and_slices(api, sim, db, syncer):
    register(api, sim, "dra")
    member = sim.cluster("dra")
    syncer.run_once()  # each change below is followed by one resync, stepped by hand
    member.create(NAMESPACES, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}, "kubectl")
    theirs = claim("theirs", "node-01", 0, 1)
    created = member.create(RESOURCECLAIMS, "ml", {k: v for k, v in theirs.items() if k != "status"}, "kubectl")
    member.update(RESOURCECLAIMS, "ml", "theirs", {**created, "status": theirs["status"]}, "kube-scheduler",
                  subresource="status")  # allocated, as the member's scheduler does
    syncer.run_once()
    assert devices(api, "dra")["drivers"]["gpu.nvidia.com"]["allocated"] == 2
    held = {d["name"]: d["allocated_by"] for d in devices(api, "dra")["devices"] if d["pool"] == "node-01"}
    assert held == {"gpu-0": ["ml/theirs"], "gpu-1": ["ml/theirs"], "gpu-2": [], "gpu-3": []}
    assert api.post("/api/v1/tenants", json={"name": "research"}).status_code == 201
    token = api.post("/api/v1/tokens", json={"role": "tenant", "tenant": "research"}).json()["token"]
    seen = api.get("/api/v1/clusters/dra/devices", headers={"Authorization": f"Bearer {token}"}).json()
    assert {d["name"]: d["allocated_by"] for d in seen["devices"] if d["pool"] == "node-01"} == {
        "gpu-0": ["a ResourceClaim"], "gpu-1": ["a ResourceClaim"], "gpu-2": [], "gpu-3": []}  # not whose
    # the driver rewrites node-00's pool: a new generation with two devices; the old one no longer counts
    rewritten = copy.deepcopy(member.get(RESOURCESLICES, "", "node-00-gpu-nvidia-com"))
    rewritten["spec"]["pool"]["generation"] = 2
    rewritten["spec"]["devices"] = rewritten["spec"]["devices"][:2]
    member.update(RESOURCESLICES, "", "node-00-gpu-nvidia-com", rewritten, "gpu-driver")
    syncer.run_once()
    assert devices(api, "dra")["drivers"]["gpu.nvidia.com"]["devices"] == 6
    member.delete(RESOURCECLAIMS, "ml", "theirs")
    syncer.run_once()
    assert devices(api, "dra")["drivers"]["gpu.nvidia.com"]["allocated"] == 0


def test_a_member_older_than_dra_keeps_to_extended_resources(api, sim):
    view = register(api, sim, "old")
    assert view["state"] == "Ready" and view["capacity"]["nvidia.com/gpu"]["allocatable"] == "16"
    assert devices(api, "old") == {"cluster": "old", "drivers": {}, "classes": [], "devices": [], "counter_sets": []}


def test_registration_asks_for_the_device_reads_only_where_the_member_serves_dra(api, sim):
    without = [r for r in access.cluster_role_rules() if r["apiGroups"] != ["resource.k8s.io"]]
    refused = api.post("/api/v1/clusters", json={"name": "dra", "kubeconfig": sim.service_account("dra", "a", without)})
    assert refused.status_code == 422
    assert "list resourceslices.resource.k8s.io; watch resourceslices.resource.k8s.io" in refused.json()["detail"]
    fine = api.post("/api/v1/clusters", json={"name": "old", "kubeconfig": sim.service_account("old", "a", without)})
    assert fine.status_code == 201, fine.text


def test_a_member_registered_before_devices_were_read_syncs_as_before_and_says_what_to_grant(api, sim, db, syncer):
    """An identity whose ClusterRole lacks the DRA reads (granted before the broker read devices): its nodes still
    sync, and the cluster says what to grant; once granted, the next resync reads the devices."""
    from clusters.sim.resources import CLUSTERROLES
    assert api.post("/api/v1/clusters", json={"name": "dra", "kubeconfig": sim.service_account(
        "dra", "broker", access.cluster_role_rules())}).status_code == 201
    member = sim.cluster("dra")
    role = copy.deepcopy(member.get(CLUSTERROLES, "", "broker"))
    role["rules"] = [r for r in role["rules"] if r["apiGroups"] != ["resource.k8s.io"]]
    member.update(CLUSTERROLES, "", "broker", role, "kubectl")
    member.cordon("node-01")
    syncer.run_once()
    view = api.get("/api/v1/clusters/dra").json()
    assert view["state"] == "Ready" and view["devices"] == {}
    assert any(w.startswith("devices not read: the broker's identity may not list resourceslices.resource.k8s.io")
               for w in view["warnings"])
    role = {**copy.deepcopy(member.get(CLUSTERROLES, "", "broker")), "rules": access.cluster_role_rules()}
    member.update(CLUSTERROLES, "", "broker", role, "kubectl")
    syncer.run_once()
    assert api.get("/api/v1/clusters/dra").json()["devices"] == {"gpu.nvidia.com": {"devices": 8, "allocated": 0}}


def test_what_a_member_reports_of_its_devices_is_untrusted():
    """Malformed slices, devices and claims are skipped with a warning; a pool being rewritten is said."""
    good = {"metadata": {"name": "s1"}, "spec": {"driver": "d", "nodeName": "n", "pool": {
        "name": "p", "generation": 3, "resourceSliceCount": 2}, "devices": [{"name": "a"}, {"no": "name"}]}}
    inventory = device_inventory(
        [good, {"metadata": {"name": "broken"}, "spec": {"pool": "not a mapping"}}, "not even an object"],
        [{"metadata": {"name": "c", "namespace": "x"}, "status": {"allocation": {"devices": {"results": [
            {"driver": "d", "pool": "p", "device": "gone"}, "junk"]}}}}],
        [{"metadata": {"name": "k"}, "spec": {"selectors": [{"cel": {"expression": "true"}}, {"cel": 7}]}}])
    assert list(inventory.devices) == ["d/p/a"] and inventory.classes == {"k": {"selectors": ["true"]}}
    assert inventory.warnings == [
        "ResourceSlice broken has no driver, pool name or pool generation: skipped",
        "ResourceSlice ? has no driver, pool name or pool generation: skipped",
        "pool p of d has 1 of its 2 ResourceSlices at generation 3: its driver is rewriting it",
        "a device of pool p of d has no name: skipped",
        "ResourceClaim x/c holds d/p/gone, which no ResourceSlice publishes"]


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["metadata", "spec", "status", "name", "pool", "driver", "generation",
                                         "devices", "attributes", "capacity", "allocation", "results", "selectors",
                                         "cel", "expression", "sharedCounters", "counters", "taints", "value"]),
                        inner, max_size=4), max_leaves=12)


@given(st.lists(JSON, max_size=3), st.lists(JSON, max_size=3), st.lists(JSON, max_size=3))
@settings(max_examples=300, deadline=None)
def test_no_report_of_devices_makes_the_inventory_fail(slices, claims, classes):
    device_inventory(slices, claims, classes)
