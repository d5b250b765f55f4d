"""JobSet parsing: every shared example, and the errors a tenant sees for bad manifests."""

import copy
import json

import pytest

from broker.engine.jobset import (PLACEMENT_RECORD_VERSION, JobSetError, effective_pod_requests, from_placement_record,
                                  parse_jobset, placement_record)
from broker.engine.placement import shape_of

from tests.examples import example as load, jobset_examples

from .fixtures import GiB, manifest



@pytest.mark.parametrize("name", jobset_examples())
def test_every_example_parses(name):
    spec = parse_jobset(load(name))
    assert spec.parts and spec.queue


def test_multislice_example_reads_topology_and_exclusive_domains():
    spec = parse_jobset(load("jobset-multislice-gpu.yaml"))
    assert (spec.queue, spec.topology_mode, spec.tier_bound, spec.max_restarts) == ("research", "hard", 2, 3)
    (workers,) = spec.parts
    assert (workers.replicas, workers.parallelism, workers.pods) == (4, 2, 8)
    assert workers.exclusive_topology == "topology.example.com/nvlink-block"
    assert spec.requests["nvidia.com/gpu"] == 64_000


def test_split_example_reads_selector_and_mode():
    spec = parse_jobset(load("jobset-split-eval.yaml"))
    assert spec.placement == "split"
    assert spec.cluster_selector.matches({"region": "eu"}) and not spec.cluster_selector.matches({"region": "ap"})
    assert spec.tier_bound is None


def test_driver_workers_priority_class_and_demand():
    spec = parse_jobset(load("jobset-driver-workers.yaml"))
    assert spec.priority_class == "high"
    assert spec.requests == {"cpu": 4000 + 8 * 8000, "memory": (16 + 8 * 64) * GiB, "nvidia.com/gpu": 8 * 4000,
                             "pods": 9 * 1000}  # every pod takes one of its node's pod slots


def test_soft_mode_has_no_bound():
    spec = parse_jobset(load("jobset-mpi.yaml"))
    assert spec.topology_mode == "soft" and spec.tier_bound is None


def test_effective_request_counts_init_containers_sidecars_and_overhead():
    pod = {"initContainers": [{"name": "big-init", "resources": {"requests": {"cpu": "6"}}},
                              {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                              {"name": "late-init", "resources": {"requests": {"cpu": "5"}}}],
           "containers": [{"name": "a", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
                          {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
           "overhead": {"cpu": "250m"}}
    # init peak: max(6, 1 + 5) = 6; running: 2 + 1 (sidecar) = 3; max = 6, plus overhead.
    assert effective_pod_requests(pod) == {"cpu": 6250, "memory": GiB, "nvidia.com/gpu": 1000}


@pytest.mark.parametrize("pod, message", [({}, "a pod needs at least one container"),
                                          ({"containers": {"name": "a"}}, "must be a list, got dict")])
def test_a_pod_spec_without_a_list_of_containers_is_refused_naming_spec_containers(pod, message):
    with pytest.raises(JobSetError) as refused:
        effective_pod_requests(pod)
    assert (refused.value.path, refused.value.message) == ("spec.containers", message)


def test_a_pods_own_resources_are_its_demand_and_a_device_among_them_is_refused_naming_the_field():
    m = manifest()
    pod = m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["resources"] = {"requests": {"cpu": "40"}}
    assert parse_jobset(m).parts[0].pod_requests["cpu"] == 40_000
    pod["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    with pytest.raises(JobSetError) as refused:
        parse_jobset(m)
    assert refused.value.path == "spec.replicatedJobs[0].template.spec.template.spec.resources.limits.nvidia.com/gpu"
    assert "cannot be asked for by the pod as a whole" in refused.value.message


def test_a_toleration_the_api_server_refuses_is_refused_naming_its_field():
    m = manifest()
    m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["tolerations"] = [
        {"operator": "Exists"}, {"key": "nvidia.com/gpu", "operator": "exists"}]
    with pytest.raises(JobSetError) as refused:
        parse_jobset(m)
    assert refused.value.path == "spec.replicatedJobs[0].template.spec.template.spec.tolerations[1].operator"
    assert refused.value.message == "'exists' is not a toleration operator: use Equal or Exists"


def test_completions_below_parallelism_caps_concurrent_pods():
    m = manifest()
    m["spec"]["replicatedJobs"][0]["template"]["spec"].update(parallelism=8, completions=2)
    assert parse_jobset(m).parts[0].parallelism == 2


def test_exclusive_topology_on_the_job_template_applies_to_that_part_only():
    m = manifest(parts=(("a", 2, 1, 8), ("b", 1, 1, 0)))
    m["spec"]["replicatedJobs"][0]["template"]["metadata"] = {
        "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"}}
    a, b = parse_jobset(m).parts
    assert (a.exclusive_topology, b.exclusive_topology) == ("rack", None)


def broken(mutate):
    m = manifest(parts=(("a", 1, 1, 8), ("b", 1, 1, 8)))
    mutate(m)
    with pytest.raises(JobSetError) as caught:
        parse_jobset(m)
    return caught.value


def rj(m, i):
    return m["spec"]["replicatedJobs"][i]


def pod(m, i):
    return rj(m, i)["template"]["spec"]["template"]["spec"]


ERRORS = {
    "wrong apiVersion": (lambda m: m.update(apiVersion="jobset.x-k8s.io/v1alpha1"), "apiVersion", "must be"),
    "wrong kind": (lambda m: m.update(kind="Job"), "kind", "JobSet"),
    "name not DNS-1123": (lambda m: m["metadata"].update(name="Big_Name"), "metadata.name", "DNS-1123"),
    "no replicatedJobs": (lambda m: m["spec"].update(replicatedJobs=[]), "spec.replicatedJobs", "at least one"),
    "duplicate part": (lambda m: rj(m, 1).update(name="a"), "spec.replicatedJobs[1].name", "unique"),
    "zero replicas": (lambda m: rj(m, 1).update(replicas=0), "spec.replicatedJobs[1].replicas", "at least 1"),
    "string parallelism": (lambda m: rj(m, 0)["template"]["spec"].update(parallelism="4"),
                           "spec.replicatedJobs[0].template.spec.parallelism", "whole number"),
    "bad quantity": (lambda m: pod(m, 1)["containers"][0]["resources"]["requests"].update(cpu="lots"),
                     "spec.replicatedJobs[1].template.spec.template.spec.containers[0].resources.requests.cpu",
                     "not a resource quantity"),
    "no containers": (lambda m: pod(m, 0).update(containers=[]),
                      "spec.replicatedJobs[0].template.spec.template.spec.containers", "at least one container"),
    "bad placement": (lambda m: m["metadata"]["annotations"].update({"archipelago.io/placement": "spread"}),
                      "metadata.annotations['archipelago.io/placement']", "whole, split"),
    "bad selector": (lambda m: m["metadata"]["annotations"].update({"archipelago.io/cluster-selector": "region in (eu"}),
                     "metadata.annotations['archipelago.io/cluster-selector']", "unbalanced"),
    "tier not a number": (lambda m: m["metadata"]["annotations"].update({
        "archipelago.io/network-topology-mode": "hard", "archipelago.io/highest-tier-allowed": "two"}),
        "metadata.annotations['archipelago.io/highest-tier-allowed']", "tier number"),
    "tier without hard": (lambda m: m["metadata"]["annotations"].update({"archipelago.io/highest-tier-allowed": "2"}),
                          "metadata.annotations['archipelago.io/highest-tier-allowed']", "hard"),
    "bad exclusive key": (lambda m: m["metadata"]["annotations"].update({
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "rack=1"}),
        "metadata.annotations['alpha.jobset.sigs.k8s.io/exclusive-topology']", "node label key"),
    "unknown success operator": (lambda m: m["spec"].update(successPolicy={"operator": "Most"}),
                                 "spec.successPolicy.operator", "All, Any"),
    "success target not a part": (lambda m: m["spec"].update(successPolicy={"targetReplicatedJobs": ["a", "c"]}),
                                  "spec.successPolicy.targetReplicatedJobs[1]", "not a ReplicatedJob"),
    "negative maxRestarts": (lambda m: m["spec"].update(failurePolicy={"maxRestarts": -1}),
                             "spec.failurePolicy.maxRestarts", "≥ 0"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_name_the_field_and_say_what_to_do(case):
    mutate, path, words = ERRORS[case]
    error = broken(mutate)
    assert error.path == path
    assert words in error.message
    assert str(error).startswith(path)


def test_parsing_does_not_modify_the_manifest():
    m = manifest()
    before = copy.deepcopy(m)
    parse_jobset(m)
    assert m == before


def test_a_part_parsed_before_is_read_again_with_the_jobsets_own_exclusive_topology():
    """Parts are kept by their text (JobSets of a pipeline share them): the JobSet's exclusive-topology annotation
    still applies to its own parts, and a change to a kept manifest is a new part."""
    exclusive = manifest("a", exclusive="topology.kubernetes.io/zone")
    plain = manifest("b")
    assert parse_jobset(exclusive).parts[0].exclusive_topology == "topology.kubernetes.io/zone"
    assert parse_jobset(plain).parts[0].exclusive_topology is None
    plain["spec"]["replicatedJobs"][0]["replicas"] = 3
    assert parse_jobset(plain).parts[0].replicas == 3


def test_a_part_that_did_not_parse_names_its_own_place_in_another_jobset():
    broken = {"name": "w", "replicas": 0, "template": manifest()["spec"]["replicatedJobs"][0]["template"]}
    first, second = manifest("a"), manifest("b")
    first["spec"]["replicatedJobs"] = [broken]
    second["spec"]["replicatedJobs"].append(copy.deepcopy(broken))
    for body, path in ((first, "spec.replicatedJobs[0].replicas"), (second, "spec.replicatedJobs[1].replicas")):
        with pytest.raises(JobSetError) as error:
            parse_jobset(body)
        assert error.value.path == path


# -- the placement record: what submission stores for the scheduler --------------------------------------------------

def _everything() -> dict:
    """A manifest that sets every field the placement spec holds: split, a cluster selector of several requirements,
    hard topology with a tier, completions, tolerations, a node selector, a required node affinity with expressions
    and fields, an exclusive topology, an empty term (matches no node), a pod overhead."""
    body = manifest("everything", (("workers", 2, 4, 8), ("eval", 1, 1, 0)), {
        "archipelago.io/placement": "split", "archipelago.io/cluster-selector": "region in (eu,us),!legacy,tier>1",
        "archipelago.io/network-topology-mode": "hard", "archipelago.io/highest-tier-allowed": "2"},
        exclusive="topology.example.com/block",
        tolerations=({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                     {"key": "spot", "operator": "Equal", "value": "yes", "effect": "NoExecute", "tolerationSeconds": 60}))
    workers = body["spec"]["replicatedJobs"][0]["template"]["spec"]
    workers["completions"] = 3
    pod = workers["template"]["spec"]
    pod["nodeSelector"] = {"zone": "a", "pool": "train"}
    pod["overhead"] = {"cpu": "250m"}
    pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100", "a100"]},
                              {"key": "rank", "operator": "Gt", "values": ["3"]}],
         "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["bad-node"]}]},
        {"matchExpressions": [{"key": "spare", "operator": "DoesNotExist"}]}]}}}
    return body


def _placement_fields(spec) -> tuple:
    return spec.placement, spec.cluster_selector, spec.topology_mode, spec.highest_tier_allowed, spec.parts


@pytest.mark.parametrize("body", [*(load(name) for name in jobset_examples()), _everything()],
                         ids=[*jobset_examples(), "every-field"])
def test_the_placement_record_gives_back_the_spec_it_was_made_of(body):
    spec = parse_jobset(body)
    again = from_placement_record(placement_record(spec))
    assert _placement_fields(again) == _placement_fields(spec)
    assert (again.requests, again.tier_bound, again.pods) == (spec.requests, spec.tier_bound, spec.pods)
    assert shape_of(again) == shape_of(spec)  # the engine's answers are shared by shape: the same ones


def test_jobs_of_one_template_share_one_record():
    first, second = (parse_jobset(manifest(name, annotations={"team": name})) for name in ("first", "second"))
    assert placement_record(first) == placement_record(second)


@pytest.mark.parametrize("text", ['{"v": 2, "parts": []}', '[]', 'null'])
def test_a_record_of_another_version_is_not_read(text):
    with pytest.raises(ValueError, match="not a version 3 placement record"):
        from_placement_record(text)


def test_what_a_record_of_this_version_says_is_fixed():
    """Pending jobs keep the records submission stored: if parsing comes to read a manifest otherwise (or the record
    to hold more), this fails — bump PLACEMENT_RECORD_VERSION (records of the old one are then read from their
    manifests) and write the new record here."""
    assert PLACEMENT_RECORD_VERSION == 3
    assert json.loads(placement_record(parse_jobset(_everything()))) == {
        "v": 3, "placement": "split",
        "clusterSelector": [["region", "In", ["eu", "us"]], ["legacy", "DoesNotExist", []], ["tier", "Gt", ["1"]]],
        "topologyMode": "hard", "highestTierAllowed": 2,
        "parts": [
            {"name": "workers", "replicas": 2, "parallelism": 3, "completions": 3,
             "podRequests": {"cpu": 1250, "memory": 1073741824000, "nvidia.com/gpu": 8000, "pods": 1000},
             "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                             {"key": "spot", "operator": "Equal", "value": "yes", "effect": "NoExecute",
                              "tolerationSeconds": 60}],
             "nodeSelector": {"zone": "a", "pool": "train"}, "exclusiveTopology": "topology.example.com/block",
             "controlPlane": False, "devices": None, "nodeAffinity": [[[["gpu", "In", ["h100", "a100"]], ["rank", "Gt", ["3"]]],
                               [["metadata.name", "NotIn", ["bad-node"]]]],
                              [[["spare", "DoesNotExist", []]], []]]},
            {"name": "eval", "replicas": 1, "parallelism": 1, "completions": None,
             "podRequests": {"cpu": 1000, "memory": 1073741824000, "pods": 1000},
             "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                             {"key": "spot", "operator": "Equal", "value": "yes", "effect": "NoExecute",
                              "tolerationSeconds": 60}],
             "nodeSelector": {}, "exclusiveTopology": "topology.example.com/block", "controlPlane": False,
             "devices": None, "nodeAffinity": None}]}
