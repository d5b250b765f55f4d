"""JobSets whose pods claim DRA devices (issue #47), from submission to their pods running on simulated members that
publish ResourceSlices and allocate claims when they bind pods: named cases, each placed by what the member's own
scheduler will allocate, and checked there."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from broker.process.testing import jobset
from clusters.jobsets import PLACEMENT_ID_LABEL
from clusters.sim.resources import NAMESPACES, PODS, RESOURCECLAIMS, RESOURCECLAIMTEMPLATES

NODE = {"cpu": "64", "memory": "512Gi", "pods": "110"}
A100_MIG = {"driver": "gpu.nvidia.com", "count": 1, "mig": ["1g.10gb", "3g.40gb", "7g.80gb"],
            "attributes": {"productName": "NVIDIA A100"}}
H100 = {"driver": "gpu.nvidia.com", "count": 4, "attributes": {"productName": "NVIDIA H100"}}
H100_CLASS = {"h100.nvidia.com": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100"'}
LONG = {"sim.archipelago.io/duration": "3600s"}  # runs until the test finishes its pods
CASES = {
    "eu-west": {"nodes": 2, "devices": A100_MIG},  # two nodes, one partitionable A100 each
    "us-east": {"nodes": 2, "devices": H100, "device_classes": H100_CLASS},  # two nodes, four whole H100s each
}


def _scenario(**clusters) -> dict:
    return {"defaults": {"node": NODE, "topology": {"leaf": 2, "spine": 1}, "duration": "60s", "version": "v1.34.1"},
            "clusters": [{"name": name, "labels": {"region": name[:2]}, **entry} for name, entry in clusters.items()]}


@pytest.fixture
def scenario_entries() -> dict:
    return CASES


@pytest.fixture
def scenario(scenario_entries) -> dict:
    return _scenario(**scenario_entries)


def template(name: str, *requests: dict) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}


def exactly(name: str, device_class: str, count: int = 1, **extra) -> dict:
    return {"name": name, "exactly": {"deviceClassName": device_class, "count": count, **extra}}


def claiming(name: str, *templates: str, pods: int = 1, parts=None, **kwargs) -> dict:
    """A JobSet whose pods ask for no GPU as an extended resource, only for the claims of `templates`."""
    manifest = jobset(name, parts=parts or (("workers", 1, pods, 0),), **kwargs)
    for rjob in manifest["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        pod["containers"][0]["resources"] = {"requests": {"cpu": "1"}, "claims": [{"name": t} for t in templates]}
        pod["resourceClaims"] = [{"name": t, "resourceClaimTemplateName": t} for t in templates]
    return manifest


def submit(federation, manifest: dict, *templates: dict) -> int:
    answer = federation.api.post("/api/v1/jobs", params={"tenant": manifest["metadata"]["namespace"]},
                                 json={"apiVersion": "v1", "kind": "List", "items": [manifest, *templates]})
    assert answer.status_code == 201, answer.text
    return answer.json()["items"][0]["id"]


def claims_on_member(federation, cluster: str, namespace: str = "team-a") -> list[dict]:
    member = federation.sim.cluster(cluster)
    with member.lock:
        return copy.deepcopy(member.list(RESOURCECLAIMS, namespace, None, None)[0])


def running_with_claims(federation, job: int) -> tuple[dict, list[dict]]:
    """The job once Running, and the claims its pods hold on its member (allocated by the member's scheduler)."""
    running = federation.until_state(job, "Running")
    [placement] = running["placements"]
    mine = [c for c in claims_on_member(federation, placement["cluster"])
            if c["metadata"]["labels"].get(PLACEMENT_ID_LABEL) == str(placement["id"])]
    return running, mine


def devices_of(claims: list[dict]) -> list[str]:
    return sorted(r["device"] for c in claims for r in c["status"]["allocation"]["devices"]["results"])


def test_whole_gpus_by_device_class_land_where_the_class_has_them(federation):
    job = submit(federation, claiming("whole", "gpus", pods=2), template("gpus", exactly("gpu", "gpu.nvidia.com", 4)))
    running, claims = running_with_claims(federation, job)
    assert running["placements"][0]["cluster"] == "us-east"  # eu-west's one A100 per node is no 4 GPUs
    assert len(claims) == 2 and all(len(c["status"]["allocation"]["devices"]["results"]) == 4 for c in claims)
    # the member's templates: named after the copy, owned by it, and the claims made from them carry the placement
    member = federation.sim.cluster("us-east")
    with member.lock:
        [made] = member.list(RESOURCECLAIMTEMPLATES, "team-a", None, None)[0]
    assert made["metadata"]["name"] == "whole-gpus"
    assert made["metadata"]["ownerReferences"][0]["kind"] == "JobSet"


def test_a_class_selector_by_product_attribute(federation):
    job = submit(federation, claiming("h100", "gpu"), template("gpu", exactly("gpu", "h100.nvidia.com")))
    running, claims = running_with_claims(federation, job)
    assert running["placements"][0]["cluster"] == "us-east" and len(devices_of(claims)) == 1


def test_mig_slices_sharing_counters_a_mix_that_fits(federation):
    """Two 3g.40gb and one 1g.10gb take 7 of an A100's 7 compute slices: one pod a GPU, two GPUs, two pods."""
    mix = template("mig", exactly("big", "mig-3g.40gb.gpu.nvidia.com", 2), exactly("small", "mig-1g.10gb.gpu.nvidia.com"))
    job = submit(federation, claiming("mix", "mig", pods=2), mix)
    running, claims = running_with_claims(federation, job)
    assert running["placements"][0]["cluster"] == "eu-west"
    assert len(claims) == 2 and len(devices_of(claims)) == 6


def test_mig_slices_sharing_counters_a_mix_that_does_not_fit(federation):
    """Two 3g.40gb and two 1g.10gb would take 8 compute slices of 7: no node has them, the job waits and says so."""
    mix = template("mig", exactly("big", "mig-3g.40gb.gpu.nvidia.com", 2), exactly("small", "mig-1g.10gb.gpu.nvidia.com", 2))
    job = submit(federation, claiming("toomuch", "mig"), mix)
    federation.step()
    federation.step()
    waiting = federation.job(job)
    assert waiting["state"] == "Queued"
    assert waiting["waiting_reasons"]["eu-west"] == (
        "needs 2 × mig-3g.40gb.gpu.nvidia.com and 2 × mig-1g.10gb.gpu.nvidia.com per pod for 1 pod; its free devices "
        "have room for 0"), waiting["waiting_reasons"]


def test_a_full_gpu_allocated_elsewhere_leaves_no_slice(federation):
    full = template("full", exactly("gpu", "mig-7g.80gb.gpu.nvidia.com"))
    first = submit(federation, claiming("first", "full", pods=2, annotations=LONG), full)
    running_with_claims(federation, first)
    slice_ = template("slice", exactly("gpu", "mig-1g.10gb.gpu.nvidia.com"))
    second = submit(federation, claiming("second", "slice"), slice_)
    federation.step()
    federation.step()
    assert federation.job(second)["state"] == "Queued"  # both A100s are whole GPUs now; us-east has no MIG
    federation.sim.cluster("eu-west").finish_pods("team-a", "jobset.sigs.k8s.io/jobset-name=first")
    running, claims = running_with_claims(federation, second)
    assert running["placements"][0]["cluster"] == "eu-west" and len(devices_of(claims)) == 1


def test_first_available_falls_back_to_its_second_choice(federation):
    """Eight H100s in all, or else 3g.40gb slices: the H100s are taken by another job, so the slices it is."""
    gpus = submit(federation, claiming("hog", "gpus", pods=2, annotations=LONG), template("gpus", exactly("gpu", "h100.nvidia.com", 4)))
    running_with_claims(federation, gpus)
    choice = template("choice", {"name": "gpu", "firstAvailable": [
        {"name": "whole", "deviceClassName": "h100.nvidia.com", "count": 2},
        {"name": "slices", "deviceClassName": "mig-3g.40gb.gpu.nvidia.com", "count": 2}]})
    job = submit(federation, claiming("flexible", "choice"), choice)
    running, claims = running_with_claims(federation, job)
    assert running["placements"][0]["cluster"] == "eu-west"
    [claim] = claims
    assert [r["request"] for r in claim["status"]["allocation"]["devices"]["results"]] == ["gpu/slices"] * 2


@pytest.mark.parametrize("scenario_entries", [{
    "eu-west": {"nodes": 1, "devices": {**H100, "taints": [{"key": "gpu.nvidia.com/ecc", "value": "failing",
                                                             "effect": "NoSchedule"}]}},
    "us-east": {"nodes": 1, "devices": H100}}])
def test_a_tainted_device_is_not_allocated_unless_tolerated(federation):
    gpus = template("gpus", exactly("gpu", "gpu.nvidia.com", 4))
    job = submit(federation, claiming("clean", "gpus", annotations=LONG), gpus)
    running, _ = running_with_claims(federation, job)
    assert running["placements"][0]["cluster"] == "us-east"
    second = submit(federation, claiming("blocked", "gpus"), gpus)
    federation.step()
    federation.step()
    assert federation.job(second)["state"] == "Queued"  # us-east's are held, eu-west's tainted
    tolerant = template("gpus", exactly("gpu", "gpu.nvidia.com", 4, tolerations=[
        {"key": "gpu.nvidia.com/ecc", "operator": "Exists", "effect": "NoSchedule"}]))
    third = submit(federation, claiming("tolerant", "gpus"), tolerant)
    running, _ = running_with_claims(federation, third)
    assert running["placements"][0]["cluster"] == "eu-west"


def test_another_workloads_claim_holds_devices(federation):
    member = federation.sim.cluster("us-east")
    with member.lock:
        member.create(NAMESPACES, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}, "kubectl")
        created = member.create(RESOURCECLAIMS, "ml", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "theirs"},
            "spec": {"devices": {"requests": [exactly("gpu", "gpu.nvidia.com", 4)]}}}, "kubectl")
        member.update(RESOURCECLAIMS, "ml", "theirs", {**created, "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-00", "device": f"gpu-{i}"}
            for i in range(4)]}}}}, "kube-scheduler", subresource="status")
    job = submit(federation, claiming("two", "gpus", pods=2), template("gpus", exactly("gpu", "h100.nvidia.com", 4)))
    federation.step()
    federation.step()
    waiting = federation.job(job)
    assert waiting["state"] == "Queued"  # four H100s of node-00 are another workload's: one node is not two pods
    one = submit(federation, claiming("one", "gpus"), template("gpus", exactly("gpu", "h100.nvidia.com", 4)))
    running, claims = running_with_claims(federation, one)
    assert {r["pool"] for c in claims for r in c["status"]["allocation"]["devices"]["results"]} == {"node-01"}


@pytest.mark.parametrize("scenario_entries", [{
    "eu-west": {"nodes": 1, "dra": False, "node": {**NODE, "nvidia.com/gpu": "8"}, "version": "v1.31.4"},
    "us-east": {"nodes": 1, "devices": H100}}])
def test_a_member_without_dra_takes_extended_resources_and_no_claims(federation):
    job = submit(federation, claiming("dra", "gpus"), template("gpus", exactly("gpu", "gpu.nvidia.com", 2)))
    running, claims = running_with_claims(federation, job)
    assert running["placements"][0]["cluster"] == "us-east" and len(devices_of(claims)) == 2
    old = federation.submit(jobset("classic", parts=(("workers", 1, 1, 8),)))
    assert federation.until_state(old, "Running")["placements"][0]["cluster"] == "eu-west"


def test_the_claims_go_when_the_job_ends(federation):
    job = submit(federation, claiming("short", "gpus"), template("gpus", exactly("gpu", "gpu.nvidia.com", 4)))
    running, claims = running_with_claims(federation, job)
    assert claims
    cluster = running["placements"][0]["cluster"]
    federation.sim.cluster(cluster).finish_pods("team-a", "jobset.sigs.k8s.io/jobset-name=short")
    federation.until_state(job, "Succeeded")
    assert not [c for c in claims_on_member(federation, cluster)
                if c["metadata"]["labels"].get(PLACEMENT_ID_LABEL) == str(running["placements"][0]["id"])]
    member = federation.sim.cluster(cluster)
    with member.lock:
        assert not [p for p in member.list(PODS, "team-a", None, None)[0]
                    if p["status"].get("phase") == "Running"]


ONE_A100 = {"eu-west": {"nodes": 1, "devices": A100_MIG}, "us-east": {"nodes": 1, "devices": A100_MIG}}
GPU_OF_SLICES = template("mig", exactly("big", "mig-3g.40gb.gpu.nvidia.com", 2),
                         exactly("small", "mig-1g.10gb.gpu.nvidia.com"))


@pytest.mark.parametrize("scenario_entries", [ONE_A100])
def test_a_split_job_claiming_partitions_lands_on_two_members_all_or_nothing(federation):
    """Each part's pod takes a whole A100's slices; each member has one A100: the parts go to both members. A job of
    three such parts has no room for its third: none of it is placed, nothing is sent."""
    too_big = submit(federation, claiming("three", "mig", split=True,
                                          parts=(("a", 1, 1, 0), ("b", 1, 1, 0), ("c", 1, 1, 0))), GPU_OF_SLICES)
    federation.step()
    federation.step()
    assert federation.job(too_big)["state"] == "Queued" and not federation.placements(too_big)
    assert not federation.copies(too_big)
    federation.api.post(f"/api/v1/jobs/{too_big}:cancel")
    job = submit(federation, claiming("two", "mig", split=True, parts=(("a", 1, 1, 0), ("b", 1, 1, 0))),
                 GPU_OF_SLICES)
    running = federation.until_state(job, "Running")
    assert sorted(p["cluster"] for p in running["placements"]) == ["eu-west", "us-east"]
    for placement in running["placements"]:
        mine = [c for c in claims_on_member(federation, placement["cluster"])
                if c["metadata"]["labels"].get(PLACEMENT_ID_LABEL) == str(placement["id"])]
        assert len(devices_of(mine)) == 3


@pytest.mark.parametrize("scenario_entries", [ONE_A100])
def test_quota_by_device_class_holds(federation):
    """An admin counts 1g.10gb slices as nvidia.com/mig-1g.10gb; the queue's quota of 2 lets two slices run, not
    three, though the members have room for fourteen."""
    mapped = federation.api.put("/api/v1/device-class-mappings/nvidia.com/mig-1g.10gb",
                                json={"deviceClasses": ["mig-1g.10gb.gpu.nvidia.com"]})
    assert mapped.status_code == 200, mapped.text
    assert federation.api.get("/api/v1/device-class-mappings").json() == [
        {"resource": "nvidia.com/mig-1g.10gb", "deviceClasses": ["mig-1g.10gb.gpu.nvidia.com"]}]
    quota = federation.api.patch("/api/v1/queues/research", json={"nominal_quota": {"nvidia.com/mig-1g.10gb": "2"}})
    assert quota.status_code == 200, quota.text
    slices = template("slice", exactly("gpu", "mig-1g.10gb.gpu.nvidia.com"))
    first = submit(federation, claiming("first", "slice", pods=2, annotations=LONG), slices)
    federation.until_state(first, "Running")
    second = submit(federation, claiming("second", "slice"), slices)
    federation.step()
    federation.step()
    waiting = federation.job(second)
    assert waiting["state"] == "Queued"
    assert "nvidia.com/mig-1g.10gb" in waiting["reason"], waiting["reason"]
    assert waiting["demand"]["nvidia.com/mig-1g.10gb"] == "1"
    federation.sim.cluster(federation.job(first)["placements"][0]["cluster"]).finish_pods(
        "team-a", "jobset.sigs.k8s.io/jobset-name=first")
    federation.until_state(second, "Running")


def test_a_mapping_names_a_quota_resource_and_a_class_counts_once(federation):
    bad = federation.api.put("/api/v1/device-class-mappings/gpus", json={"deviceClasses": ["gpu.nvidia.com"]})
    assert bad.status_code == 422 and "domain/name" in bad.json()["detail"]
    assert federation.api.put("/api/v1/device-class-mappings/example.com/gpu",
                              json={"deviceClasses": ["gpu.nvidia.com"]}).status_code == 200
    twice = federation.api.put("/api/v1/device-class-mappings/example.com/other",
                               json={"deviceClasses": ["gpu.nvidia.com"]})
    assert twice.status_code == 422 and "already count as example.com/gpu" in twice.json()["detail"]


@pytest.mark.parametrize("templates, where, words", [
    ([], "resourceClaimTemplateName", "is not among the ResourceClaimTemplates sent"),
    ([template("gpus", exactly("gpu", "gpu.nvidia.com", selectors=[{"cel": {"expression": "device.driver =="}}]))],
     "exactly.selectors[0].cel.expression", "is not CEL the broker can evaluate"),
    ([template("gpus", exactly("gpu", "gpu.nvidia.com", adminAccess=True))], "exactly.adminAccess",
     "admin access to devices in use is not brokered"),
    ([template("gpus", exactly("gpu", "gpu.nvidia.com", allocationMode="All"))], "exactly.count",
     "must be unset with allocationMode All"),
    ([template("gpus", {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"},
                        "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com"}]})],
     "requests[0]", "must have exactly one of exactly and firstAvailable"),
    ([template("gpus", exactly("gpu", "gpu.nvidia.com")), template("unused", exactly("gpu", "gpu.nvidia.com"))],
     "", "no JobSet's pods name the ResourceClaimTemplates unused"),
])
def test_bad_claims_are_refused_at_submission_with_the_field_to_fix(federation, templates, where, words):
    answer = federation.api.post("/api/v1/jobs", params={"tenant": "team-a"}, json={
        "apiVersion": "v1", "kind": "List", "items": [claiming("bad", "gpus"), *templates]})
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert answer.headers["content-type"] == "application/problem+json"
    assert where in problem["detail"] and words in problem["detail"], problem["detail"]
    assert federation.api.get("/api/v1/jobs").json()["items"] == []  # nothing stored


def test_a_named_resource_claim_cannot_be_brokered(federation):
    manifest = claiming("named", "gpus")
    pod = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "shared-gpus"}]
    answer = federation.api.post("/api/v1/jobs", params={"tenant": "team-a"}, json=manifest)
    assert answer.status_code == 422
    assert "resourceClaims[0].resourceClaimName: a ResourceClaim exists on one member only" in answer.json()["detail"]


def test_the_documented_example_is_a_yaml_stream_that_runs(federation):
    """docs/examples/jobset-mig-claims.yaml, as `archipelago submit` sends it: a JobSet and its template, one stream."""
    body = (Path(__file__).resolve().parents[2] / "docs" / "examples" / "jobset-mig-claims.yaml").read_bytes()
    answer = federation.api.post("/api/v1/jobs", params={"tenant": "team-a"}, content=body,
                                 headers={"Content-Type": "application/yaml"})
    assert answer.status_code == 201, answer.text
    [item] = answer.json()["items"]
    running, claims = running_with_claims(federation, item["id"])
    assert running["placements"][0]["cluster"] == "eu-west" and len(devices_of(claims)) == 6
