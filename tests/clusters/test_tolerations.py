"""Taints and tolerations as the kube-scheduler matches them (clusters/rules/taints.py)."""

from __future__ import annotations

import pytest

from clusters.rules.taints import describe_taint, toleration_error, tolerates, untolerated

GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize("toleration, tolerated", [
    ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, True),
    ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}, True),  # no effect: every effect
    ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}, False),
    ({"key": "nvidia.com/gpu", "value": "absent"}, False),
    ({"key": "nvidia.com/gpu"}, False),  # Equal with no value matches only an empty value
    ({"key": "other", "value": "present"}, False),
    ({"key": "nvidia.com/gpu", "operator": "Exists"}, True),
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, True),
    ({"key": "other", "operator": "Exists"}, False),
    ({"operator": "Exists"}, True),  # no key: every taint
    ({"operator": "Exists", "effect": "NoExecute"}, False),
    ({"value": "present"}, False),  # Equal needs a key
    ({}, False),
])
def test_a_toleration_matches_a_taint_as_the_scheduler_does(toleration, tolerated):
    assert tolerates(toleration, GPU) is tolerated


def test_an_empty_value_equals_an_absent_one():
    assert tolerates({"key": "dedicated", "value": ""}, {"key": "dedicated", "effect": "NoSchedule"})
    assert tolerates({"key": "dedicated"}, {"key": "dedicated", "value": "", "effect": "NoSchedule"})


def test_only_untolerated_blocking_taints_keep_a_pod_off():
    soft = {"key": "spot", "effect": "PreferNoSchedule"}
    evicting = {"key": "maintenance", "value": "now", "effect": "NoExecute"}
    taints = [GPU, soft, evicting]
    assert untolerated(taints, []) == [GPU, evicting]
    assert untolerated(taints, iter([{"key": "nvidia.com/gpu", "operator": "Exists"}])) == [evicting]
    assert untolerated(taints, [{"key": "nvidia.com/gpu", "operator": "Exists"},
                                {"key": "maintenance", "value": "now"}]) == []
    assert untolerated([], [{"operator": "Exists"}]) == []


@pytest.mark.parametrize("taint, text", [
    (GPU, "nvidia.com/gpu=present:NoSchedule"),
    ({"key": "spot", "effect": "PreferNoSchedule"}, "spot:PreferNoSchedule"),
    ({"key": "spot", "value": "", "effect": "NoExecute"}, "spot:NoExecute"),
])
def test_a_taint_reads_as_kubectl_writes_it(taint, text):
    assert describe_taint(taint) == text


# Kubernetes' validateTolerations: what the API server refuses in a pod's tolerations, and so in a JobSet's
REFUSED_TOLERATIONS = {
    "an unknown operator": ({"key": "gpu", "operator": "Gt", "value": "1"}, "operator",
                            "'Gt' is not a toleration operator: use Equal or Exists"),
    "a value with Exists": ({"key": "gpu", "operator": "Exists", "value": "x"}, "value",
                            "must be empty with operator Exists (it matches every value)"),
    "Equal without a key": ({"operator": "Equal", "value": "x"}, "operator",
                            "must be Exists when the key is empty (a toleration of every taint)"),
    "no key and no operator": ({"value": "x"}, "operator",
                               "must be Exists when the key is empty (a toleration of every taint)"),
    "a key that is no label key": ({"key": "-gpu", "operator": "Exists"}, "key",
                                   "'-gpu' is not a taint key (a label key, e.g. nvidia.com/gpu)"),
    "a value that is no label value": ({"key": "gpu", "value": "a b"}, "value",
                                       "'a b' is not a taint value (a label value)"),
    "an unknown effect": ({"key": "gpu", "operator": "Exists", "effect": "NoRun"}, "effect",
                          "'NoRun' is not a taint effect: use NoSchedule, PreferNoSchedule, NoExecute, or none for all"),
    "a time limit that is no number": ({"key": "gpu", "operator": "Exists", "effect": "NoExecute",
                                        "tolerationSeconds": "30"}, "tolerationSeconds",
                                       "'30' is not a whole number of seconds"),
    "a time limit off NoExecute": ({"key": "gpu", "operator": "Exists", "effect": "NoSchedule",
                                    "tolerationSeconds": 30}, "tolerationSeconds",
                                   "only a NoExecute toleration has a time limit: set effect NoExecute or drop it"),
}


@pytest.mark.parametrize("case", REFUSED_TOLERATIONS)
def test_a_toleration_the_api_server_refuses_is_refused_naming_the_field(case):
    toleration, field, message = REFUSED_TOLERATIONS[case]
    assert toleration_error(toleration) == (field, message)


@pytest.mark.parametrize("toleration", [
    {"operator": "Exists"}, {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "gpu", "value": "present"}, {"key": "gpu", "operator": "Equal", "value": ""},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
])
def test_a_toleration_the_api_server_takes_is_taken(toleration):
    assert toleration_error(toleration) is None
