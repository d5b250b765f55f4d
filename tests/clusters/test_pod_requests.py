"""Resource quantities, what one pod reserves on a node as the kube-scheduler counts it, and why pods are not ready
(clusters/rules/quantity.py, clusters/rules/pods.py): shared by the broker and the simulator, so exact to the milli-unit."""

from __future__ import annotations

from decimal import Decimal

import pytest

from clusters.rules.pods import (PodSpecError, as_list, as_mapping, check_resource_requirements, container_requests,
                                 effective_requests, why_not_ready)
from clusters.rules.quantity import add_into, format_quantity, parse_quantity, to_milli
from clusters.sim.requests import pod_requests as sim_pod_requests


@pytest.mark.parametrize("text, value", [
    ("1", "1"), ("+2", "2"), ("-3", "-3"), ("1.5", "1.5"), (".5", "0.5"), ("5.", "5"), (" 7 ", "7"),
    ("500m", "0.5"), ("3n", "3e-9"), ("4u", "4e-6"), ("2k", "2000"), ("2M", "2e6"), ("2G", "2e9"),
    ("2T", "2e12"), ("2P", "2e15"), ("2E", "2e18"),
    ("1Ki", "1024"), ("1Mi", "1048576"), ("1Gi", "1073741824"), ("1Ti", str(2**40)), ("1Pi", str(2**50)),
    ("1Ei", str(2**60)), ("1.5Gi", str(3 * 2**29)),
    ("1e3", "1000"), ("2E+2", "200"), ("5e-1", "0.5"),
    (3, "3"), (0.25, "0.25"),
])
def test_a_quantity_parses_to_its_exact_value(text, value):
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "1 Gi", "1gi", "Gi", "1e", "--1", True, None, [1]])
def test_what_is_not_a_quantity_is_refused_naming_it(text):
    with pytest.raises(ValueError) as raised:
        parse_quantity(text)
    assert str(raised.value) == f"not a resource quantity: {text!r}"


@pytest.mark.parametrize("text, milli", [("1", 1000), ("250m", 250), ("0.1", 100), ("1n", 1), ("1500u", 2),
                                         ("-1n", 0), ("1Ki", 1024000), (2, 2000)])
def test_milli_units_round_up_as_the_scheduler_does(text, milli):
    assert to_milli(text) == milli


@pytest.mark.parametrize("milli, resource, text", [
    (4000, "cpu", "4"), (500, "cpu", "500m"), (1500, "cpu", "1500m"), (0, "cpu", "0"),
    (512 * 2**30 * 1000, "memory", "512Gi"), (1536 * 2**20 * 1000, "memory", "1.5Gi"),
    (2**40 * 1000, "memory", "1Ti"), (int(3.953 * 2**40) * 1000, "memory", "3.953Ti"),
    (2**20 * 1000, "ephemeral-storage", "1Mi"), (2**10 * 1000, "memory", "1Ki"), (1023 * 1000, "memory", "1023"),
    (8000, "nvidia.com/gpu", "8"), (2**30 * 1000, "nvidia.com/gpu", "1.07374e+09"), (500, "pods", "0.5"),
])
def test_a_quantity_reads_for_people_in_its_resources_unit(milli, resource, text):
    assert format_quantity(milli, resource) == text


def test_amounts_add_into_a_running_total_and_come_off_again():
    total = {"cpu": 1000}
    add_into(total, {"cpu": 500, "memory": 7})
    assert total == {"cpu": 1500, "memory": 7}
    add_into(total, {"cpu": 1500, "gpu": 2}, sign=-1)
    assert total == {"cpu": 0, "memory": 7, "gpu": -2}


def _container(requests=None, limits=None, **extra) -> dict:
    resources = {**({"requests": requests} if requests is not None else {}),
                 **({"limits": limits} if limits is not None else {})}
    return {"name": "c", "resources": resources, **extra}


def test_a_limit_without_a_request_is_the_request():
    assert container_requests(_container({"cpu": "1"}, {"cpu": "2", "nvidia.com/gpu": "4"}), "c") == {
        "cpu": 1000, "nvidia.com/gpu": 4000}
    assert container_requests(_container(limits={"memory": "1Ki"}), "c") == {"memory": 1024000}
    assert container_requests({"name": "bare"}, "c") == {}


@pytest.mark.parametrize("container, path, message", [
    (_container({"cpu": "lots"}), "c.resources.requests.cpu",
     "'lots' is not a resource quantity (write e.g. \"500m\", \"4\", \"16Gi\")"),
    (_container(limits={"cpu": "lots"}), "c.resources.limits.cpu",
     "'lots' is not a resource quantity (write e.g. \"500m\", \"4\", \"16Gi\")"),
    (_container({"cpu": None}), "c.resources.requests.cpu",
     "None is not a resource quantity (write e.g. \"500m\", \"4\", \"16Gi\")"),
    (_container({"memory": "-1"}), "c.resources.requests.memory", "must not be negative"),
    # a limit a request shadows is parsed all the same: the API server refuses it either way
    (_container({"cpu": "1"}, {"cpu": "lots"}), "c.resources.limits.cpu",
     "'lots' is not a resource quantity (write e.g. \"500m\", \"4\", \"16Gi\")"),
    (_container({"cpu": "1"}, {"cpu": "-2"}), "c.resources.limits.cpu", "must not be negative"),
    (_container({"cpu": "1"}, {"cpu": "1e5000"}), "c.resources.limits.cpu",
     "'1e5000' is out of range: a quantity is at most 9223372036854775807"),
    (_container({"cpu": "lots"}, {"cpu": "1"}), "c.resources.requests.cpu",
     "'lots' is not a resource quantity (write e.g. \"500m\", \"4\", \"16Gi\")"),
    ({"resources": []}, "c.resources", "must be an object, got list"),
    ({"resources": {"requests": "1"}}, "c.resources.requests", "must be an object, got str"),
    ({"resources": {"limits": ["1"]}}, "c.resources.limits", "must be an object, got list"),
    ("c", "c", "must be an object, got str"),
])
def test_a_wrong_request_names_its_field(container, path, message):
    with pytest.raises(PodSpecError) as raised:
        container_requests(container, "c")
    assert (raised.value.path, raised.value.message, str(raised.value)) == (path, message, f"{path}: {message}")


def test_absent_fields_are_empty_and_wrong_ones_name_their_path():
    assert as_mapping(None, "x") == {} and as_list(None, "x") == []
    assert as_mapping({"a": 1}, "x") == {"a": 1} and as_list([1], "x") == [1]

    class Wrong(ValueError):
        def __init__(self, path, message):
            super().__init__(f"{path} -> {message}")

    with pytest.raises(Wrong, match="^x -> must be a list, got dict$"):
        as_list({}, "x", Wrong)
    with pytest.raises(PodSpecError, match="^x: must be an object, got int$"):
        as_mapping(1, "x")


def test_a_pod_reserves_its_containers_sidecars_and_overhead():
    assert effective_requests({"containers": [_container({"cpu": "1", "memory": "1Gi"}),
                                              _container({"cpu": "500m", "nvidia.com/gpu": "0"})],
                               "overhead": {"cpu": "100m"}}) == {"cpu": 1600, "memory": 2**30 * 1000}
    assert effective_requests({}) == {}


def test_overhead_adds_even_a_resource_no_container_asks_for_and_zero_overhead_is_allowed():
    assert effective_requests({"containers": [_container({"cpu": "1"})],
                               "overhead": {"memory": "1Mi", "cpu": "0"}}) == {"cpu": 1000, "memory": 2**20 * 1000}


def test_a_request_of_one_milli_unit_is_kept_and_one_of_zero_is_not():
    assert effective_requests({"initContainers": [_container({"cpu": "0", "memory": "0"})],
                               "containers": [_container({"cpu": "1m"})]}) == {"cpu": 1}


def test_the_largest_init_container_counts_with_the_sidecars_started_before_it():
    pod = {"initContainers": [_container({"cpu": "1"}, restartPolicy="Always"),  # a sidecar: runs throughout
                              _container({"cpu": "4", "memory": "1"}),  # runs alone beside the sidecar: 5 cpu
                              _container({"cpu": "2"}, restartPolicy="Always"),  # a second sidecar
                              _container({"cpu": "2"})],  # beside both sidecars: 5 cpu
           "containers": [_container({"cpu": "1", "memory": "2"})]}
    assert effective_requests(pod) == {"cpu": 5000, "memory": 2000}
    pod["containers"] = [_container({"cpu": "3"})]  # now the app containers and the sidecars are larger
    assert effective_requests(pod) == {"cpu": 6000, "memory": 1000}
    assert effective_requests({"initContainers": [_container({"cpu": "2"})], "containers": [_container({"cpu": "1"})]}
                              ) == {"cpu": 2000}
    # the largest, not the last; and a sidecar's memory counts beside an init container that asks for none
    assert effective_requests({"initContainers": [_container({"memory": "3"}, restartPolicy="Always"),
                                                  _container({"cpu": "4"}), _container({"cpu": "2"})]}
                              ) == {"cpu": 4000, "memory": 3000}


def test_what_the_pod_asks_for_as_a_whole_replaces_its_containers_total():
    """Kubernetes' pod-level resources: the kube-scheduler reserves them instead of what the containers ask for."""
    pod = {"resources": {"requests": {"cpu": "40"}, "limits": {"memory": "8Gi"}},
           "containers": [_container({"cpu": "1", "nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1"}),
                          _container({"cpu": "2"})], "overhead": {"cpu": "250m"}}
    # cpu: the pod's 40, not the containers' 3, + the overhead; memory: no container asks, so the limit is the request
    assert effective_requests(pod) == {"cpu": 40250, "memory": 8 * 2**30 * 1000, "nvidia.com/gpu": 1000}
    pod["containers"][1] = _container({"cpu": "2", "memory": "1Gi"})  # a container asks: its request stands
    assert effective_requests(pod)["memory"] == 2**30 * 1000


# Pods and what each reserves: read by the broker (clusters/rules/pods.py) and, on its own, by the simulator's scheduler
# (clusters/sim/requests.py). The two must agree, or the broker places pods a member will not bind.
AS_THE_SCHEDULER_COUNTS = {
    "containers and overhead": ({"containers": [_container({"cpu": "1", "memory": "1Gi"}), _container({"cpu": "1m"})],
                                 "overhead": {"cpu": "100m", "example.com/slot": "1"}},
                                {"cpu": 1101, "memory": 2**30 * 1000, "example.com/slot": 1000}),
    "a limit alone": ({"containers": [_container(limits={"nvidia.com/gpu": "8", "cpu": "2"})]},
                      {"nvidia.com/gpu": 8000, "cpu": 2000}),
    "the largest init container beside the sidecars before it": (
        {"initContainers": [_container({"cpu": "1"}, restartPolicy="Always"), _container({"cpu": "4", "memory": "1"}),
                            _container({"cpu": "2"}, restartPolicy="Always"), _container({"cpu": "2"})],
         "containers": [_container({"cpu": "1", "memory": "2"})]}, {"cpu": 5000, "memory": 2000}),
    "sidecars beside the containers": (
        {"initContainers": [_container({"memory": "3"}, restartPolicy="Always"), _container({"cpu": "4"})],
         "containers": [_container({"cpu": "3"})]}, {"cpu": 4000, "memory": 3000}),
    "the pod's own requests": ({"resources": {"requests": {"cpu": "40", "memory": "1Gi"}},
                                "containers": [_container({"cpu": "1", "nvidia.com/gpu": "1"},
                                                          {"nvidia.com/gpu": "1"})]},
                               {"cpu": 40000, "memory": 2**30 * 1000, "nvidia.com/gpu": 1000}),
    "the pod's own limit, no container asking": ({"resources": {"limits": {"cpu": "8"}},
                                                  "containers": [_container({"memory": "1"})]},
                                                 {"cpu": 8000, "memory": 1000}),
    "the pod's own limit, a container asking": ({"resources": {"limits": {"cpu": "8"}},
                                                 "containers": [_container({"cpu": "3"})]}, {"cpu": 3000}),
    "the pod's own hugepages limit, above its containers'": (
        {"resources": {"limits": {"hugepages-2Mi": "8Mi", "memory": "1Gi"}},
         "containers": [_container(limits={"hugepages-2Mi": "2Mi", "memory": "512Mi"})]},
        {"hugepages-2Mi": 8 * 2**20 * 1000, "memory": 2**29 * 1000}),
    "a request of nothing, asked for": ({"resources": {"limits": {"cpu": "4"}},
                                        "initContainers": [_container({"cpu": "0"})],
                                        "containers": [_container({"memory": "1"})]}, {"memory": 1000}),
    "the pod's own hugepages and overhead": (
        {"resources": {"requests": {"hugepages-2Mi": "4Mi", "memory": "1Gi"}, "limits": {"hugepages-2Mi": "4Mi"}},
         "containers": [_container({"cpu": "1"})], "overhead": {"memory": "1Mi"}},
        {"cpu": 1000, "memory": (2**30 + 2**20) * 1000, "hugepages-2Mi": 4 * 2**20 * 1000}),
}


@pytest.mark.parametrize("case", AS_THE_SCHEDULER_COUNTS)
def test_the_broker_and_the_simulated_scheduler_count_a_pod_alike(case):
    pod, expected = AS_THE_SCHEDULER_COUNTS[case]
    assert effective_requests(pod) == expected
    assert sim_pod_requests(pod) == {**expected, "pods": 1000}


@pytest.mark.parametrize("pod, path, message", [
    ({"containers": {}}, "containers", "must be a list, got dict"),
    ({"initContainers": "x"}, "initContainers", "must be a list, got str"),
    ({"containers": [_container(), _container({"cpu": "x"})]}, "containers[1].resources.requests.cpu",
     "'x' is not a resource quantity (write e.g. \"500m\", \"4\", \"16Gi\")"),
    ({"initContainers": [_container({"cpu": "x"})]}, "initContainers[0].resources.requests.cpu",
     "'x' is not a resource quantity (write e.g. \"500m\", \"4\", \"16Gi\")"),
    ({"overhead": {"cpu": "x"}}, "overhead.cpu",
     "'x' is not a resource quantity (write e.g. \"500m\", \"4\", \"16Gi\")"),
    ({"overhead": {"cpu": None}}, "overhead.cpu",
     "None is not a resource quantity (write e.g. \"500m\", \"4\", \"16Gi\")"),
    ({"overhead": {"nvidia.com/gpu": "-8"}}, "overhead.nvidia.com/gpu", "must not be negative"),
    ({"overhead": {"cpu": "1e5000"}}, "overhead.cpu",
     "'1e5000' is out of range: a quantity is at most 9223372036854775807"),
    ({"containers": [_container({"cpu": 1e300})]}, "containers[0].resources.requests.cpu",
     "'1e+300' is out of range: a quantity is at most 9223372036854775807"),
    ({"overhead": []}, "overhead", "must be an object, got list"),
])
def test_a_wrong_pod_spec_names_the_field(pod, path, message):
    with pytest.raises(PodSpecError) as raised:
        effective_requests(pod)
    assert (raised.value.path, raised.value.message) == (path, message)


def _resources(requests: dict | None = None, limits: dict | None = None) -> dict:
    """A pod of one container with these requests and limits."""
    return {"containers": [{"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}}]}


# Kubernetes' validateResourceRequirements: what the API server refuses in a pod's resources
REFUSED_RESOURCES = {
    "a device asked for without a limit": (
        _resources({"nvidia.com/gpu": "8"}), "containers[0].resources.limits.nvidia.com/gpu",
        "set a limit for nvidia.com/gpu, equal to the request: Kubernetes never overcommits it (or set only the limit: "
        "the request is taken from it)"),
    "a device's request below its limit": (
        _resources({"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "8"}), "containers[0].resources.requests.nvidia.com/gpu",
        "must equal the nvidia.com/gpu limit (8): Kubernetes never overcommits it"),
    "a part of a device": (
        _resources(limits={"nvidia.com/gpu": "500m"}), "containers[0].resources.limits.nvidia.com/gpu",
        "'500m' is not a whole number: nvidia.com/gpu is counted in whole units"),
    "a request prefix on an extended resource": (
        _resources(limits={"requests.nvidia.com/gpu": "1"}), "containers[0].resources.limits.requests.nvidia.com/gpu",
        "'requests.nvidia.com/gpu' is not an extended resource name: drop the \"requests.\" prefix (it names a "
        "quota, not a resource)"),
    "hugepages asked for without a limit": (
        _resources({"hugepages-2Mi": "1Gi", "memory": "1Gi"}), "containers[0].resources.limits.hugepages-2Mi",
        "set a limit for hugepages-2Mi, equal to the request: Kubernetes never overcommits it (or set only the limit: "
        "the request is taken from it)"),
    "hugepages that are not whole pages": (
        _resources(limits={"hugepages-2Mi": "3Mi", "memory": "1Gi"}), "containers[0].resources.limits.hugepages-2Mi",
        "'3Mi' is not a positive whole number of hugepages-2Mi pages (hugepages-<page size>, e.g. hugepages-2Mi: 1Gi)"),
    "hugepages of no page size": (
        _resources(limits={"hugepages-huge": "1Gi", "memory": "1Gi"}), "containers[0].resources.limits.hugepages-huge",
        "'1Gi' is not a positive whole number of hugepages-huge pages (hugepages-<page size>, e.g. hugepages-2Mi: "
        "1Gi)"),
    "no hugepages at all": (
        _resources(limits={"hugepages-1Gi": "0", "memory": "1Gi"}), "containers[0].resources.limits.hugepages-1Gi",
        "'0' is not a positive whole number of hugepages-1Gi pages (hugepages-<page size>, e.g. hugepages-2Mi: 1Gi)"),
    "a name in capitals": (
        _resources(limits={"NVIDIA.com/gpu": "0"}), "containers[0].resources.limits.NVIDIA.com/gpu",
        "'NVIDIA.com/gpu' is not a resource name: an optional domain and '/', then at most 63 alphanumerics, '-', '_' "
        "or '.' (e.g. nvidia.com/gpu)"),
    "a domain and no name": (
        _resources({"kubernetes.io/": "1"}), "containers[0].resources.requests.kubernetes.io/",
        "'kubernetes.io/' is not a resource name: an optional domain and '/', then at most 63 alphanumerics, '-', '_' "
        "or '.' (e.g. nvidia.com/gpu)"),
    "two slashes": (
        _resources(limits={"nvidia.com/gpu/x": "1"}), "containers[0].resources.limits.nvidia.com/gpu/x",
        "'nvidia.com/gpu/x' is not a resource name: an optional domain and '/', then at most 63 alphanumerics, '-', "
        "'_' or '.' (e.g. nvidia.com/gpu)"),
    "a domain too long for the resource's quota": (
        _resources(limits={"a" * 245 + "/gpu": "1"}), f"containers[0].resources.limits.{'a' * 245}/gpu",
        f"{'a' * 245 + '/gpu'!r:.80} is not an extended resource name: its domain is longer than 244 characters"),
    "hugepages alone": (
        _resources(limits={"hugepages-2Mi": "1Gi"}), "containers[0].resources",
        "hugepages need a cpu or memory request or limit beside them"),
    "a request above its limit": (
        _resources({"cpu": "4"}, {"cpu": "2"}), "containers[0].resources.requests.cpu",
        "must not exceed the cpu limit (2)"),
    "a name without a domain that is no standard resource": (
        _resources({"gpu": "1"}), "containers[0].resources.requests.gpu",
        "'gpu' is not a resource a container may ask for: use cpu, memory, ephemeral-storage, hugepages-<size>, or a "
        "device plugin's resource with its domain (e.g. nvidia.com/gpu)"),
    "the pod slot": (
        _resources({"pods": "1"}), "containers[0].resources.requests.pods",
        "'pods' is not a resource a container may ask for: use cpu, memory, ephemeral-storage, hugepages-<size>, or a "
        "device plugin's resource with its domain (e.g. nvidia.com/gpu)"),
    "a device asked for by the pod as a whole": (
        {"resources": {"limits": {"nvidia.com/gpu": "8"}}, "containers": [{"name": "c"}]},
        "resources.limits.nvidia.com/gpu", "'nvidia.com/gpu' cannot be asked for by the pod as a whole: only cpu, "
        "memory and hugepages-<size> can; ask for it in a container's resources"),
    "a pod's request below what its containers ask for together": (
        {"resources": {"requests": {"cpu": "2"}}, "containers": [_resources({"cpu": "1500m"})["containers"][0]] * 2},
        "resources.requests.cpu", "must be at least what the containers ask for together (3)"),
    "a pod's limit below what its containers ask for together": (
        {"resources": {"limits": {"cpu": "1"}}, **_resources({"cpu": "2"})}, "resources.limits.cpu",
        "must be at least what the containers ask for together (2): the pod's request is taken from them"),
    "a container's limit above the pod's": (
        {"resources": {"limits": {"memory": "1Gi"}}, **_resources(limits={"memory": "2Gi"})},
        "containers[0].resources.limits.memory", "must not exceed the pod's memory limit (1Gi)"),
    "a pod's request above its limit": (
        {"resources": {"requests": {"cpu": "4"}, "limits": {"cpu": "2"}}, "containers": [{"name": "c"}]},
        "resources.requests.cpu", "must not exceed the cpu limit (2)"),
    "pod-level resources on Windows": (
        {"os": {"name": "windows"}, "resources": {"requests": {"cpu": "1"}}, "containers": [{"name": "c"}]},
        "resources", "pod-level resources may not be set for a Windows pod: set them on its containers"),
    "in an init container": (
        {"initContainers": [{"name": "i", "resources": {"requests": {"example.com/fpga": "1"}}}],
         "containers": [{"name": "c"}]}, "initContainers[0].resources.limits.example.com/fpga",
        "set a limit for example.com/fpga, equal to the request: Kubernetes never overcommits it (or set only the "
        "limit: the request is taken from it)"),
}


@pytest.mark.parametrize("case", REFUSED_RESOURCES)
def test_resources_the_api_server_refuses_are_refused_naming_the_field(case):
    pod, path, message = REFUSED_RESOURCES[case]
    with pytest.raises(PodSpecError) as raised:
        check_resource_requirements(pod)
    assert (raised.value.path, raised.value.message) == (path, message)


@pytest.mark.parametrize("pod", [
    _resources(limits={"nvidia.com/gpu": "8"}),  # the request is taken from the limit
    _resources({"nvidia.com/gpu": "8", "cpu": "1"}, {"nvidia.com/gpu": "8000m", "cpu": "2"}),  # equal, and below
    _resources({"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "1Gi"}),  # no limit: overcommitted at will
    _resources({"memory": "1Gi", "hugepages-1Gi": "2Gi"}, {"hugepages-1Gi": "2Gi"}),
    _resources(limits={"kubernetes.io/cpu": "1"}) | {"initContainers": [{"name": "i"}]},
    # Kubernetes' own resources in a kubernetes.io domain: overcommitted at will, in parts, with no standard name
    _resources({"kubernetes.io/batch-cpu": "500m", "scheduling.kubernetes.io/slot": "1"}),
    _resources({"example.com/fpga": "2"}, {"example.com/fpga": "2"}),
    _resources(limits={"a" * 244 + "/gpu": "1"}),  # "requests." and its domain: 253 characters, as a quota's may be
    _resources(limits={"hugepages-2Mi": "1Gi", "cpu": "1"}),  # 512 pages
    {"resources": {"requests": {"cpu": "3", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},  # the pod's own
     **_resources({"cpu": "3", "memory": "512Mi"}, {"memory": "2Gi"})},
])
def test_resources_the_api_server_takes_are_taken(pod):
    check_resource_requirements(pod)


def _pod(phase: str | None = "Pending", ready: str | None = None, scheduled: dict | None = None,
         waiting: dict | None = None) -> dict:
    conditions = ([{"type": "Ready", "status": ready}] if ready else []) + \
        ([{"type": "PodScheduled", **scheduled}] if scheduled else [])
    statuses = [{"name": "sidecar", "state": {"running": {}}}] + ([{"name": "c", "state": {"waiting": waiting}}]
                                                                   if waiting else [])
    return {"status": {**({"phase": phase} if phase else {}), "conditions": conditions, "containerStatuses": statuses}}


UNSCHEDULABLE = {"status": "False", "reason": "Unschedulable",
                 "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."}
PULLING = {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"nope\""}


def test_pods_not_ready_are_told_in_the_members_words_most_common_first():
    pods = [_pod(scheduled=UNSCHEDULABLE), _pod(scheduled=UNSCHEDULABLE), _pod(scheduled=UNSCHEDULABLE),
            _pod("Running", "False", {"status": "True"}, PULLING),
            _pod("Running", "True"), _pod("Succeeded"), _pod("Failed"),  # ready or done: nothing to say
            _pod("Running", "False", {"status": "True"}, {"reason": "ContainerCreating"}),
            _pod("Running", "False", {"status": "True"}, {"reason": "ContainerCreating"}),
            _pod(None, scheduled={"status": "False", "reason": "SchedulingGated"})]
    assert why_not_ready(pods) == ("3 pods Pending: 0/8 nodes are available: 8 Insufficient nvidia.com/gpu.; "
                                   "2 pods ContainerCreating: waiting; 1 pod ImagePullBackOff: Back-off pulling image "
                                   "\"nope\"")
    assert why_not_ready(pods, limit=5).endswith("; 1 pod Pending: SchedulingGated")
    assert why_not_ready([_pod("Running", "False", {"status": "True"}), _pod(None)]) == (
        "1 pod Running: not ready; 1 pod Pending: not ready")
    assert why_not_ready([{}, {"status": None}]) == "2 pods Pending: not ready"
    assert why_not_ready([_pod("Running", "True")]) == why_not_ready([]) == ""
