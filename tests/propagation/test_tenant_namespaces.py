"""Tenants' namespaces on the members: the broker makes them with its mark and the tenant's Pod Security level (which
the member's admission then enforces), relabels them when the level changes, and uses no namespace it did not make
unless an admin lets it."""

from __future__ import annotations

from broker.process.testing import jobset
from clusters.sim.resources import NAMESPACES, PODS

LONG = {"sim.archipelago.io/duration": "1h"}
ON_EU = {**LONG, "archipelago.io/cluster-selector": "region=eu"}
ENFORCE = "pod-security.kubernetes.io/enforce"


def _labels(federation, cluster: str, namespace: str) -> dict:
    member = federation.sim.cluster(cluster)
    with member.lock:
        return member.get(NAMESPACES, "", namespace)["metadata"].get("labels") or {}


def _pods(federation, cluster: str, namespace: str) -> list[dict]:
    member = federation.sim.cluster(cluster)
    with member.lock:
        return member.list(PODS, namespace, None, None)[0]


def test_the_namespace_the_broker_makes_carries_the_tenants_level_and_follows_its_changes(federation):
    job = federation.submit(jobset("train", annotations=ON_EU))
    federation.until_state(job, "Running")
    labels = _labels(federation, "eu-west", "team-a")
    assert {key: labels.get(key) for key in (ENFORCE, f"{ENFORCE}-version", "archipelago.io/tenant",
                                             "app.kubernetes.io/managed-by")} == {
        ENFORCE: "baseline", f"{ENFORCE}-version": "latest", "archipelago.io/tenant": "team-a",
        "app.kubernetes.io/managed-by": "archipelago"}

    assert federation.api.patch("/api/v1/tenants/team-a", json={"pod_security": "restricted"}).status_code == 200
    federation.dispatcher.run_once()
    assert _labels(federation, "eu-west", "team-a")[ENFORCE] == "restricted"


def test_a_privileged_tenants_pods_run_and_a_baseline_members_namespace_would_refuse_them(federation):
    """The same hostNetwork pods: created under the privileged label; refused by the member where the namespace is
    baseline (had the broker forwarded them), in the API server's words."""
    assert federation.api.patch("/api/v1/tenants/team-b", json={"pod_security": "privileged"}).status_code == 200
    manifest = jobset("host", namespace="team-b", annotations=ON_EU)
    manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["hostNetwork"] = True
    job = federation.submit(manifest)
    federation.until_state(job, "Running")
    assert _labels(federation, "eu-west", "team-b")[ENFORCE] == "privileged"
    assert len(_pods(federation, "eu-west", "team-b")) == 2

    assert federation.api.patch("/api/v1/tenants/team-b", json={"pod_security": "baseline"}).status_code == 200
    federation.dispatcher.run_once()
    assert _labels(federation, "eu-west", "team-b")[ENFORCE] == "baseline"
    member = federation.sim.cluster("eu-west")
    pod = _pods(federation, "eu-west", "team-b")[0]
    with member.lock:
        member.delete(PODS, "team-b", pod["metadata"]["name"], "Background")
    federation.step(5.0)  # the Job controller makes a new pod: the member's admission refuses it
    assert len(_pods(federation, "eu-west", "team-b")) == 1


def test_a_namespace_the_broker_did_not_make_is_refused_until_an_admin_lets_the_tenant_adopt_it(federation):
    member = federation.sim.cluster("eu-west")
    with member.lock:
        member.create(NAMESPACES, "", {"metadata": {"name": "team-a", "labels": {"owner": "platform"}}}, "kubectl")
    job = federation.submit(jobset("train", annotations=ON_EU))
    federation.scheduler.run_once()
    federation.dispatcher.run_once()
    why = ("namespace team-a exists on eu-west and Archipelago did not create it: the broker uses only namespaces it "
           "made; an admin may let tenant team-a use it (archipelago tenants update team-a --adopt team-a)")
    [refused] = federation.placements(job)
    assert (refused.state, refused.last_error) == ("Deleted", f"refused: {why}")
    failed = federation.job(job)  # eu-west was the only member its selector allows
    assert (failed["state"], failed["reason"]) == ("Failed", f"every member it could run on refused it (eu-west: {why})")
    assert _labels(federation, "eu-west", "team-a") == {"owner": "platform", "kubernetes.io/metadata.name": "team-a"}

    assert federation.api.patch("/api/v1/tenants/team-a", json={"adoptable_namespaces": ["team-a"]}).status_code == 200
    again = federation.submit(jobset("again", annotations=ON_EU))
    federation.until_state(again, "Running")
    assert _labels(federation, "eu-west", "team-a")[ENFORCE] == "baseline"


def test_a_job_whose_tenants_level_was_lowered_before_it_was_applied_fails_without_reaching_the_member(federation):
    assert federation.api.patch("/api/v1/tenants/team-b", json={"pod_security": "privileged"}).status_code == 200
    manifest = jobset("host", namespace="team-b", annotations=ON_EU)
    manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["hostNetwork"] = True
    job = federation.submit(manifest)
    assert federation.api.patch("/api/v1/tenants/team-b", json={"pod_security": "baseline"}).status_code == 200
    failed = federation.until_state(job, "Failed", "Running")
    assert failed["state"] == "Failed"
    assert ("its tenant's Pod Security level is now baseline: spec.replicatedJobs[0].template.spec.template.spec: "
            'violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)') in failed["reason"]
    assert federation.copies(job) == []
