"""A simulated cluster that behaves as a busy real one when its scenario asks: controllers that lag, images
that never pull, a JobSet controller whose counts are missing or late, pods made by hand that hold nodes, and pods
that take their grace period to terminate (a foreground deletion waits for them)."""

from __future__ import annotations

from kubernetes import client

from .helpers import api_client, jobset
from .test_controller import _create, _pod_template, _pods, _status

SCENARIO = {"clusters": [
    {"name": "busy", "nodes": 4, "node": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8"},
     "controller_lag": "10s", "unpullable_images": ["registry.invalid/*"], "pod_termination": "30s"},
    {"name": "old", "nodes": 2, "node": {"cpu": "8", "memory": "32Gi"}, "jobset_counts": "omitted"},
]}
MEMBER = "busy"


def test_a_lagging_control_plane_makes_jobs_and_pods_only_after_its_lag(sim, api, namespace):
    _create(api, namespace, jobset("slow", [("w", 1, 2)]))
    sim.settle()
    assert _pods(api, namespace) == [] and _status(api, namespace, "slow") == {}
    sim.advance(10)  # the JobSet controller gets to it: Jobs, but the Job controller lags too
    assert client.BatchV1Api(api).list_namespaced_job(namespace).items and _pods(api, namespace) == []
    sim.advance(10)
    pods = _pods(api, namespace)
    assert len(pods) == 2 and all(p.status.phase == "Running" for p in pods)
    assert _status(api, namespace, "slow")["replicatedJobsStatus"][0]["ready"] == 1


def test_an_image_that_never_pulls_keeps_its_pods_pending_on_their_nodes(sim, api, namespace):
    body = jobset("stuck", [("w", 1, 2)])
    _pod_template(body)["spec"]["containers"][0]["image"] = "registry.invalid/train:1"
    _pod_template(body)["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "8"}}
    _create(api, namespace, body)
    sim.settle()
    sim.advance(20)  # past the control plane's lag
    sim.advance(600)
    pods = _pods(api, namespace)
    assert len(pods) == 2 and all(p.status.phase == "Pending" and p.spec.node_name for p in pods)
    waiting = pods[0].status.container_statuses[0].state.waiting
    assert (waiting.reason, waiting.message) == ("ImagePullBackOff", 'Back-off pulling image "registry.invalid/train:1"')
    assert _status(api, namespace, "stuck")["replicatedJobsStatus"][0]["ready"] == 0
    # they hold their nodes: a pod made by hand finds two of four GPU nodes taken
    core = client.CoreV1Api(api)
    for i in range(3):
        core.create_namespaced_pod(namespace, {"metadata": {"name": f"by-hand-{i}"}, "spec": {"containers": [
            {"name": "c", "image": "busybox", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}})
    sim.advance(1)
    phases = sorted(core.read_namespaced_pod(f"by-hand-{i}", namespace).status.phase for i in range(3))
    assert phases == ["Pending", "Running", "Running"]


def test_a_jobset_controller_that_writes_no_counts(sim, namespace):
    with api_client(sim, "old") as api:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
        _create(api, namespace, jobset("quiet", [("w", 1, 1)]))
        sim.settle()
        sim.advance(120)
        status = _status(api, namespace, "quiet")
        assert status["terminalState"] == "Completed" and "replicatedJobsStatus" not in status


def test_a_foreground_deletion_keeps_the_jobset_until_its_jobs_and_pods_are_gone(sim, api, namespace):
    """As kube's garbage collector does: the JobSet stays, Terminating with the `foregroundDeletion` finalizer, while
    its Jobs and pods go; a new one of its name must wait (issue #45, case 4)."""
    _create(api, namespace, jobset("going", [("w", 1, 2)]))
    sim.settle()
    sim.advance(10)  # past the control plane's lag: its Jobs, then their pods
    sim.advance(10)
    assert len(_pods(api, namespace)) == 2
    custom = client.CustomObjectsApi(api)
    custom.delete_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "going",
                                           propagation_policy="Foreground")
    going = custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "going")
    assert going["metadata"]["finalizers"] == ["foregroundDeletion"] and going["metadata"]["deletionTimestamp"]
    try:
        _create(api, namespace, jobset("going", [("w", 1, 1)]))
        raise AssertionError("a JobSet of the name of one being deleted was created")
    except client.ApiException as exc:
        assert exc.status == 409 and "object is being deleted" in exc.body
    sim.advance(29)
    assert [p.metadata.deletion_timestamp is not None for p in _pods(api, namespace)] == [True, True]  # Terminating
    assert custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "going")
    sim.advance(1)  # their grace period over: the pods go, then their Jobs, then the JobSet
    assert custom.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets")["items"] == []
    assert _pods(api, namespace) == [] and client.BatchV1Api(api).list_namespaced_job(namespace).items == []
