"""Cluster overrides on their way to simulated members over HTTPS: each member receives the JobSet its rules
make of it, the dry run shows it beforehand, the job page says which rules applied, and a rule that would
make the JobSet invalid fails the placement by its name."""

from __future__ import annotations

import pytest

from broker.process.testing import jobset
from clusters.jobsets import JOB_ID_LABEL

MIRROR = {"name": "eu-mirror", "order": 1, "selector": "region=eu", "image": {"registry": "mirror.eu:5000"}}
NCCL = {"name": "eu-west-nccl", "order": 2, "cluster": "eu-west",
        "env": [{"name": "NCCL_IB_HCA", "value": "mlx5", "container": "main"}],
        "tolerations": [{"key": "example.com/fabric", "operator": "Exists", "effect": "NoSchedule"}]}


def to(region: str, name: str) -> dict:
    return jobset(name, annotations={"archipelago.io/cluster-selector": f"region={region}"})


def containers(copy: dict) -> list[dict]:
    return copy["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]


def add_rules(federation, *rules: dict) -> None:
    for rule in rules:
        answer = federation.api.post("/api/v1/overrides", json=rule)
        assert answer.status_code == 201, answer.text


def test_overrides_rewrite_the_copy_of_the_clusters_they_select_only(federation):
    add_rules(federation, NCCL, MIRROR)
    eu, us = federation.submit(to("eu", "in-eu")), federation.submit(to("us", "in-us"))
    for job in (eu, us):
        federation.until_state(job, "Running")

    [eu_copy] = federation.copies(eu)
    assert eu_copy["cluster"] == "eu-west"
    [main] = containers(eu_copy)
    assert main["image"] == "mirror.eu:5000/library/busybox"
    assert main["env"] == [{"name": "NCCL_IB_HCA", "value": "mlx5"}]
    pod = eu_copy["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert {"key": "example.com/fabric", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    # the broker's labels and node pins are stamped after the rules
    assert pod["metadata"]["labels"][JOB_ID_LABEL] == str(eu)
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert all(t["matchFields"][0]["key"] == "metadata.name" for t in terms["nodeSelectorTerms"])

    [us_copy] = federation.copies(us)
    assert us_copy["cluster"] == "us-east"
    [main] = containers(us_copy)
    assert main["image"] == "busybox" and "env" not in main
    assert "tolerations" not in us_copy["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]

    eu_page, us_page = federation.job(eu), federation.job(us)
    assert [p["overrides"] for p in eu_page["placements"]] == [["eu-mirror", "eu-west-nccl"]]
    assert [p["overrides"] for p in us_page["placements"]] == [[]]
    applied = [e["message"] for e in eu_page["events"] if e["reason"] == "Applied"]
    assert applied and "override rules eu-mirror, eu-west-nccl" in applied[0]
    assert federation.until_state(eu, "Succeeded", seconds=30)["state"] == "Succeeded"


def test_the_dry_run_shows_the_rules_per_cluster_and_the_copy_the_chosen_one_receives(federation):
    add_rules(federation, MIRROR, NCCL)
    answer = federation.api.post("/api/v1/jobs:dry-run", json=to("eu", "preview"), params={"tenant": "team-a"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert {c["cluster"]: c["overrides"] for c in body["clusters"]} == {
        "eu-west": ["eu-mirror", "eu-west-nccl"], "us-east": []}
    [placement] = body["placements"]
    assert placement["cluster"] == "eu-west" and placement["overrides"] == ["eu-mirror", "eu-west-nccl"]
    assert placement["override_error"] is None
    [main] = containers(placement["manifest"])
    assert main["image"] == "mirror.eu:5000/library/busybox"
    assert main["env"] == [{"name": "NCCL_IB_HCA", "value": "mlx5"}]
    assert "kueue.x-k8s.io/queue-name" not in placement["manifest"]["metadata"]["labels"]

    answer = federation.api.post("/api/v1/jobs:dry-run", json=to("us", "preview"), params={"tenant": "team-a"})
    [placement] = answer.json()["placements"]
    assert placement["overrides"] == [] and containers(placement["manifest"])[0]["image"] == "busybox"


BREAKING = [
    ("strip", {"jsonPatch": [{"op": "remove",
                              "path": "/spec/replicatedJobs/0/template/spec/template/spec/containers"}]},
     "containers", "busybox"),
    ("local-prefix", {"image": {"prefix": "mirror.example/cache"}}, "not a valid image reference",
     "localhost:5000/busybox:1"),
]


@pytest.mark.parametrize("name, change, words, image", BREAKING, ids=[b[0] for b in BREAKING])
def test_a_rule_that_makes_the_jobset_invalid_fails_the_placement_by_name(federation, name, change, words, image):
    add_rules(federation, MIRROR, {"name": name, "order": 5, "cluster": "eu-west", **change})
    manifest = to("eu", "broken")
    containers(manifest)[0]["image"] = image
    dry = federation.api.post("/api/v1/jobs:dry-run", json=manifest, params={"tenant": "team-a"}).json()
    [preview] = dry["placements"]
    assert preview["manifest"] is None and f"override rule {name!r}" in preview["override_error"]

    job = federation.submit(manifest)
    failed = federation.until_state(job, "Failed", "Running")
    assert failed["state"] == "Failed"
    assert f"override rule {name!r}" in failed["reason"] and words in failed["reason"]
    [placement] = failed["placements"]
    assert placement["state"] == "Failed" and f"override rule {name!r}" in placement["last_error"]
    [event] = [e for e in failed["events"] if e["reason"] == "OverrideFailed"]
    assert event["type"] == "Warning" and name in event["message"] and "eu-west" in event["message"]
    assert federation.copies(job) == []  # nothing went out, not even half of it


def test_each_part_of_a_split_job_gets_the_rules_of_its_own_cluster(federation):
    add_rules(federation, MIRROR, {"name": "first-part-priority", "cluster": "us-east", "jsonPatch": [
        {"op": "add", "path": "/spec/replicatedJobs/0/template/spec/template/spec/priorityClassName",
         "value": "us-batch"}]})
    job = federation.submit(jobset("sweep", split=True, parts=(("shard-a", 2, 8, 8), ("shard-b", 2, 8, 8))))
    running = federation.until_state(job, "Running")
    rules = {p["cluster"]: p["overrides"] for p in running["placements"]}
    assert rules == {"eu-west": ["eu-mirror"], "us-east": ["first-part-priority"]}
    for copy in federation.copies(job):
        pod = copy["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        if copy["cluster"] == "eu-west":
            assert pod["containers"][0]["image"] == "mirror.eu:5000/library/busybox"
            assert "priorityClassName" not in pod
        else:  # index 0 of the part's own copy: its one ReplicatedJob
            assert pod["containers"][0]["image"] == "busybox" and pod["priorityClassName"] == "us-batch"
