"""The simulated JobSet controller, Job controller and scheduler, observed through the API."""

from __future__ import annotations

import pytest
from kubernetes import client, watch

from .helpers import jobset, wait_for

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


def _create(api, namespace, body):
    return client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def _status(api, namespace, name) -> dict:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name).get(
        "status") or {}


def _pods(api, namespace, selector=""):
    return client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items


def _condition(status, type_):
    return next((c for c in status.get("conditions") or () if c["type"] == type_), None)


def _pod_template(body, rjob=0):
    return body["spec"]["replicatedJobs"][rjob]["template"]["spec"]["template"]


def test_pods_bind_within_capacity_and_wait_when_nothing_fits(sim, api, namespace):
    body = jobset("big", [("w", 1, 3)])
    _pod_template(body)["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "8"},
                                                                 "limits": {"nvidia.com/gpu": "8"}}
    _create(api, namespace, body)
    huge = jobset("huge", [("w", 1, 1)])
    _pod_template(huge)["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "9"}}
    _create(api, namespace, huge)
    sim.settle()
    placed = _pods(api, namespace, "jobset.sigs.k8s.io/jobset-name=big")
    assert len({p.spec.node_name for p in placed}) == 3  # one full GPU node each
    assert all(p.status.phase == "Running" for p in placed)
    pending = _pods(api, namespace, "jobset.sigs.k8s.io/jobset-name=huge")[0]
    assert pending.status.phase == "Pending" and pending.spec.node_name is None
    scheduled = next(c for c in pending.status.conditions if c.type == "PodScheduled")
    assert scheduled.reason == "Unschedulable" and "Insufficient nvidia.com/gpu" in scheduled.message
    assert _status(api, namespace, "huge")["replicatedJobsStatus"][0]["ready"] == 0


def test_capacity_comes_back_when_pods_finish(sim, api, namespace):
    """Fill every GPU node, queue one more JobSet, and watch it start once the first ones end."""
    per_node = {"requests": {"nvidia.com/gpu": "8"}}
    first = jobset("fill", [("w", 1, 16)])
    _pod_template(first)["spec"]["containers"][0]["resources"] = per_node
    _pod_template(first)["metadata"] = {"annotations": {"sim.archipelago.io/duration": "10m"}}
    _create(api, namespace, first)
    sim.settle()
    second = jobset("next", [("w", 1, 1)])
    _pod_template(second)["spec"]["containers"][0]["resources"] = per_node
    _create(api, namespace, second)
    sim.settle()
    waiting = _pods(api, namespace, "jobset.sigs.k8s.io/jobset-name=next")[0]
    assert waiting.status.phase == "Pending"
    sim.advance(601)
    assert _status(api, namespace, "fill")["terminalState"] == "Completed"
    started = _pods(api, namespace, "jobset.sigs.k8s.io/jobset-name=next")[0]
    assert started.status.phase == "Running" and started.spec.node_name
    sim.advance(61)
    assert _status(api, namespace, "next")["terminalState"] == "Completed"


def test_node_selector_affinity_and_taints(sim, api, namespace):
    on_cpu = jobset("cpu-pool", [("w", 1, 2)])
    _pod_template(on_cpu)["spec"].update(nodeSelector={"pool": "cpu"}, tolerations=[
        {"key": "dedicated", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"}])
    untolerated = jobset("no-toleration", [("w", 1, 1)])
    _pod_template(untolerated)["spec"]["nodeSelector"] = {"pool": "cpu"}
    leaf = jobset("leaf-2", [("w", 1, 2)])
    _pod_template(leaf)["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "network.archipelago.io/leaf", "operator": "In", "values": ["leaf-2"]}]}]}}}
    for body in (on_cpu, untolerated, leaf):
        _create(api, namespace, body)
    sim.settle()
    cluster = sim.cluster("eu-west")
    labels_of = lambda pod: cluster.node(pod.spec.node_name)["metadata"]["labels"]
    assert all(labels_of(p)["pool"] == "cpu" for p in _pods(api, namespace, "jobset.sigs.k8s.io/jobset-name=cpu-pool"))
    assert all(labels_of(p)["network.archipelago.io/leaf"] == "leaf-2"
               for p in _pods(api, namespace, "jobset.sigs.k8s.io/jobset-name=leaf-2"))
    stuck = _pods(api, namespace, "jobset.sigs.k8s.io/jobset-name=no-toleration")[0]
    assert stuck.status.phase == "Pending"
    assert "untolerated taint" in next(c for c in stuck.status.conditions if c.type == "PodScheduled").message


def test_exclusive_topology_gives_each_job_its_own_domain(sim, api, namespace):
    body = jobset("slices", [("w", 3, 2)])
    body["metadata"]["annotations"] = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "network.archipelago.io/leaf"}
    _create(api, namespace, body)
    sim.settle()
    cluster = sim.cluster("eu-west")
    domains: dict[str, set[str]] = {}
    for pod in _pods(api, namespace, "jobset.sigs.k8s.io/jobset-name=slices"):
        assert pod.metadata.annotations["alpha.jobset.sigs.k8s.io/exclusive-topology"] == "network.archipelago.io/leaf"
        leaf = cluster.node(pod.spec.node_name)["metadata"]["labels"]["network.archipelago.io/leaf"]
        domains.setdefault(pod.metadata.labels["jobset.sigs.k8s.io/job-index"], set()).add(leaf)
    assert len(domains) == 3 and all(len(d) == 1 for d in domains.values())
    assert len(set().union(*domains.values())) == 3  # no two jobs share a leaf


def test_failure_policy_restarts_then_fails(sim, api, namespace):
    body = jobset("flaky", failurePolicy={"maxRestarts": 2})
    body["metadata"]["annotations"] = {"sim.archipelago.io/fail": "workers"}
    _create(api, namespace, body)
    sim.settle()
    for restarts in (1, 2):
        sim.advance(61)
        status = _status(api, namespace, "flaky")
        assert status["restarts"] == restarts and "terminalState" not in status
        attempts = {p.metadata.labels["jobset.sigs.k8s.io/restart-attempt"] for p in _pods(api, namespace)}
        assert attempts == {str(restarts)}  # the previous attempt's jobs and pods are gone
    sim.advance(61)
    status = _status(api, namespace, "flaky")
    assert status["terminalState"] == "Failed" and status["restarts"] == 2
    failed = _condition(status, "Failed")
    assert failed["status"] == "True" and failed["reason"] == "ReachedMaxRestarts"


def test_failure_without_policy_fails_at_once(sim, api, namespace):
    body = jobset("fragile")
    body["metadata"]["annotations"] = {"sim.archipelago.io/fail": "workers"}
    _create(api, namespace, body)
    sim.settle()
    sim.advance(61)
    status = _status(api, namespace, "fragile")
    assert status["terminalState"] == "Failed" and _condition(status, "Failed")["reason"] == "FailedJobs"
    assert status["replicatedJobsStatus"][0]["failed"] == 2


def test_restart_recovers_when_failure_is_transient(sim, api, namespace):
    body = jobset("recovers", failurePolicy={"maxRestarts": 3})
    body["metadata"]["annotations"] = {"sim.archipelago.io/fail": "workers", "sim.archipelago.io/fail-attempts": "1"}
    _create(api, namespace, body)
    sim.settle()
    sim.advance(61)
    sim.advance(61)
    status = _status(api, namespace, "recovers")
    assert status["terminalState"] == "Completed" and status["restarts"] == 1


def test_success_policy_targets_the_driver(sim, api, namespace):
    body = jobset("driver-workers", [("driver", 1, 1), ("workers", 2, 2)],
                  successPolicy={"operator": "All", "targetReplicatedJobs": ["driver"]})
    _pod_template(body, 1)["metadata"] = {"annotations": {"sim.archipelago.io/duration": "1h"}}
    _create(api, namespace, body)
    sim.settle()
    sim.advance(61)
    status = _status(api, namespace, "driver-workers")
    assert status["terminalState"] == "Completed"
    by_name = {r["name"]: r for r in status["replicatedJobsStatus"]}
    assert by_name["driver"]["succeeded"] == 1
    assert client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=(
        "jobset.sigs.k8s.io/replicatedjob-name=workers")).items == []  # still-running workers are cleaned up


def test_suspend_and_resume(sim, api, namespace):
    co = client.CustomObjectsApi(api)
    _create(api, namespace, jobset("paused", suspend=True))
    sim.settle()
    status = _status(api, namespace, "paused")
    assert _condition(status, "Suspended")["status"] == "True"
    assert status["replicatedJobsStatus"][0]["suspended"] == 2
    assert _pods(api, namespace) == []
    co.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "paused", {"spec": {"suspend": False}})
    sim.settle()
    status = _status(api, namespace, "paused")
    resumed = _condition(status, "Suspended")
    assert resumed["status"] == "False" and resumed["reason"] == "ResumeJobs"
    assert len(_pods(api, namespace)) == 4 and status["replicatedJobsStatus"][0]["ready"] == 2


def test_in_order_startup(sim, api, namespace):
    body = jobset("ordered", [("workers", 1, 2), ("launcher", 1, 1)], startupPolicy={"startupPolicyOrder": "InOrder"})
    _create(api, namespace, body)
    sim.settle()
    status = _status(api, namespace, "ordered")
    assert _condition(status, "StartupPolicyCompleted")["status"] == "True"
    assert _condition(status, "StartupPolicyInProgress")["status"] == "False"


def test_deleting_a_jobset_frees_its_capacity(sim, api, namespace):
    cluster = sim.cluster("eu-west")
    _create(api, namespace, jobset("doomed", [("w", 1, 4)]))
    sim.settle()
    nodes = {p.spec.node_name for p in _pods(api, namespace)}
    before = sum(cluster.usage().get(n, {}).get("cpu", 0) for n in nodes)
    client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "doomed")
    sim.settle()
    after = sum(cluster.usage().get(n, {}).get("cpu", 0) for n in nodes)
    assert before - after == 4000 and _pods(api, namespace) == []


def test_cordon_and_node_loss(sim, api, namespace):
    cluster = sim.cluster("eu-west")
    cpu_nodes = [n for n in cluster.node_names() if n.startswith("cpu-")]
    cluster.cordon(cpu_nodes[0])
    try:
        body = jobset("cordoned", [("w", 1, 2)])
        _pod_template(body)["spec"].update(nodeSelector={"pool": "cpu"}, tolerations=[
            {"key": "dedicated", "operator": "Exists"}])
        body["spec"]["failurePolicy"] = {"maxRestarts": 0}
        _create(api, namespace, body)
        sim.settle()
        assert {p.spec.node_name for p in _pods(api, namespace)} == {cpu_nodes[1]}
        cluster.set_node_ready(cpu_nodes[1], False)
        sim.settle()
        assert {p.status.phase for p in _pods(api, namespace)} == {"Failed"}
        assert _status(api, namespace, "cordoned")["terminalState"] == "Failed"
    finally:
        cluster.uncordon(cpu_nodes[0])
        cluster.set_node_ready(cpu_nodes[1], True)


def test_namespace_deletion_removes_its_content(sim, api, namespace):
    _create(api, namespace, jobset("gone"))
    sim.settle()
    core = client.CoreV1Api(api)
    core.delete_namespace(namespace)
    sim.settle()
    with pytest.raises(client.exceptions.ApiException) as err:
        core.read_namespace(namespace)
    assert err.value.status == 404
    assert core.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={namespace}").items == []


@pytest.mark.parametrize("speed", [1000])
def test_real_time_at_high_speed(speed):
    """Without advance(): at 1000x a 60 s JobSet finishes in well under a real second."""
    from clusters.sim.testing import running_simulator

    from .helpers import api_client

    with running_simulator({"clusters": [{"name": "fast", "nodes": 2}]}, speed=speed, tls=False) as sim:
        with api_client(sim, "fast") as api:
            client.CoreV1Api(api).create_namespace({"metadata": {"name": "ns"}})
            created = _create(api, "ns", jobset("quick", [("w", 1, 1)]))
            co = client.CustomObjectsApi(api)
            states = []
            for event in watch.Watch().stream(co.list_namespaced_custom_object, GROUP, VERSION, "ns", PLURAL,
                                              resource_version=created["metadata"]["resourceVersion"],
                                              timeout_seconds=30):
                state = (event["object"].get("status") or {}).get("terminalState")
                if state:
                    states.append(state)
                    break
            assert states == ["Completed"]
            wait_for(lambda: all(p.status.phase == "Succeeded" for p in _pods(api, "ns")))
