"""Which nodes the simulated kube-scheduler admits a pod to (clusters/sim/fit.py), and that the broker's own reading
of the same rules (clusters/rules/labels.py, clusters/rules/taints.py) agrees with it case by case: the two are written apart,
so that a broker that sends pods where a member will not bind them shows here."""

from __future__ import annotations

import pytest

from broker.engine.jobset import parse_jobset
from clusters.rules.taints import untolerated
from clusters.sim.fit import repelling_taint, selects
from tests.placement.fixtures import manifest

NODE = {"metadata": {"name": "node-07", "labels": {"zone": "a", "gpu-gen": "9", "rack": "r1", "serial": "1_0",
                                                  "shelf": "\u0663", "huge": "9" * 20, "offset": "+3"}}}


def _affinity(*terms: dict) -> dict:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}


def _expr(key: str, operator: str, *values: str) -> dict:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


SELECTS = {
    "nothing asked": ({}, True),
    "a node selector that matches": ({"nodeSelector": {"zone": "a", "rack": "r1"}}, True),
    "a node selector one pair of which does not": ({"nodeSelector": {"zone": "a", "rack": "r2"}}, False),
    "In": (_affinity({"matchExpressions": [_expr("zone", "In", "b", "a")]}), True),
    "In, no such label": (_affinity({"matchExpressions": [_expr("region", "In", "eu")]}), False),
    "NotIn, no such label": (_affinity({"matchExpressions": [_expr("region", "NotIn", "eu")]}), True),
    "NotIn its value": (_affinity({"matchExpressions": [_expr("zone", "NotIn", "a")]}), False),
    "Exists": (_affinity({"matchExpressions": [_expr("rack", "Exists")]}), True),
    "DoesNotExist": (_affinity({"matchExpressions": [_expr("rack", "DoesNotExist")]}), False),
    "Gt": (_affinity({"matchExpressions": [_expr("gpu-gen", "Gt", "8")]}), True),
    "Gt, equal": (_affinity({"matchExpressions": [_expr("gpu-gen", "Gt", "9")]}), False),
    "Lt": (_affinity({"matchExpressions": [_expr("gpu-gen", "Lt", "10")]}), True),
    "Lt on a label that is no number": (_affinity({"matchExpressions": [_expr("zone", "Lt", "10")]}), False),
    "Gt on a label Go reads as no number": (_affinity({"matchExpressions": [_expr("serial", "Gt", "5")]}), False),
    "Gt on a label of other digits": (_affinity({"matchExpressions": [_expr("shelf", "Gt", "5")]}), False),
    "Gt on a label beyond 64 bits": (_affinity({"matchExpressions": [_expr("huge", "Gt", "0")]}), False),
    "Gt on a signed label": (_affinity({"matchExpressions": [_expr("offset", "Gt", "-5")]}), True),
    "a term's expressions are ANDed": (_affinity({"matchExpressions": [_expr("zone", "In", "a"),
                                                                       _expr("rack", "In", "r2")]}), False),
    "terms are ORed": (_affinity({"matchExpressions": [_expr("zone", "In", "b")]},
                                 {"matchExpressions": [_expr("rack", "In", "r1")]}), True),
    "an empty term selects no node": (_affinity({}), False),
    "matchFields on the node's name": (_affinity({"matchFields": [_expr("metadata.name", "In", "node-07")]}), True),
    "matchFields NotIn the node's name": (_affinity({"matchFields": [_expr("metadata.name", "NotIn", "node-07")]}),
                                          False),
    "matchFields and matchExpressions in one term": (
        _affinity({"matchFields": [_expr("metadata.name", "In", "node-07")],
                   "matchExpressions": [_expr("zone", "In", "b")]}), False),
    "a node selector and an affinity both": ({"nodeSelector": {"zone": "b"},
                                              **_affinity({"matchExpressions": [_expr("zone", "Exists")]})}, False),
}


def _broker_selects(spec: dict, node: dict) -> bool:
    """As the broker reads a submitted JobSet whose pod template says `spec`."""
    jobset = manifest()
    jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].update(spec)
    return parse_jobset(jobset).parts[0].may_run_on(node["metadata"]["name"], node["metadata"]["labels"])


@pytest.mark.parametrize("case", SELECTS)
def test_the_simulated_scheduler_and_the_broker_admit_a_pod_to_a_node_alike(case):
    spec, admitted = SELECTS[case]
    assert selects(spec, NODE) is admitted
    assert _broker_selects(spec, NODE) is admitted


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATES = {
    "the same key, value and effect": ([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}], True),
    "no effect: every effect": ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}], True),
    "another effect": ([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}], False),
    "another value": ([{"key": "nvidia.com/gpu", "value": "absent"}], False),
    "Exists on its key": ([{"key": "nvidia.com/gpu", "operator": "Exists"}], True),
    "Exists with no key: every taint": ([{"operator": "Exists"}], True),
    "Exists with no key, another effect": ([{"operator": "Exists", "effect": "NoExecute"}], False),
    "an operator Kubernetes does not know": ([{"key": "nvidia.com/gpu", "operator": "Gt", "value": "present"}], False),
    "one of several": ([{"key": "other", "operator": "Exists"}, {"key": "nvidia.com/gpu", "value": "present"}], True),
    "none at all": ([], False),
}


@pytest.mark.parametrize("case", TOLERATES)
def test_the_simulated_scheduler_and_the_broker_read_tolerations_alike(case):
    tolerations, tolerated = TOLERATES[case]
    node = {**NODE, "spec": {"taints": [{"key": "soft", "effect": "PreferNoSchedule"}, GPU_TAINT]}}
    assert (repelling_taint(node, tolerations) is None) is tolerated
    assert (not untolerated(node["spec"]["taints"], tolerations)) is tolerated
