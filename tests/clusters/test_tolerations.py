"""Taints and tolerations as the kube-scheduler matches them (clusters/taints.py)."""

from __future__ import annotations

import pytest

from clusters.taints import describe_taint, tolerates, untolerated

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
