"""The words the engine's reasons are made of (broker/placement/explain.py): amounts, shortfalls,
pod shapes and durations as a tenant reads them."""

from __future__ import annotations

import pytest

from broker.placement.explain import amount, duration, pods_phrase, shortfall
from broker.placement.model import GPU


@pytest.mark.parametrize("resource, milli, text", [
    (GPU, 1000, "1 GPU"), (GPU, 8000, "8 GPUs"), (GPU, 500, "0.5 GPUs"), (GPU, 0, "0 GPUs"),
    ("cpu", 1000, "1 CPU"), ("cpu", 64000, "64 CPUs"), ("cpu", 500, "500m CPUs"),
    ("memory", 200 * 2**30 * 1000, "200Gi of memory"),
    ("ephemeral-storage", 2**20 * 1000, "1Mi of ephemeral-storage"),
    ("example.com/fpga", 2000, "2 example.com/fpga"), ("example.com/fpga", 1500, "1.5 example.com/fpga"),
])
def test_an_amount_reads_in_its_resources_words(resource, milli, text):
    assert amount(resource, milli) == text


def test_the_shortfall_names_gpus_first_then_resources_by_name():
    demand = {"cpu": 4000, GPU: 16000, "memory": 10}
    assert shortfall(demand, {"cpu": 0, GPU: 8000, "memory": 0}) == (GPU, 16000, 8000)
    assert shortfall(demand, {"cpu": 0, GPU: 16000}) == ("cpu", 4000, 0)
    assert shortfall(demand, {"cpu": 4000, GPU: 16000, "memory": 9}) == ("memory", 10, 9)
    assert shortfall(demand, {"cpu": 4000, GPU: 16000, "memory": 10}) is None
    assert shortfall({"cpu": 1000}, {"cpu": -3000}) == ("cpu", 1000, 0)  # overcommitted reads as none free
    assert shortfall({}, {}) is None


@pytest.mark.parametrize("count, pod, text", [
    (4, {GPU: 8000, "cpu": 1000}, "4 pods of 8 GPUs"),
    (1, {GPU: 1000}, "1 pod of 1 GPU"),
    (2, {"cpu": 500, "memory": 1}, "2 pods of 500m CPUs"),
    (3, {"memory": 1}, "3 pods of no requests"),
])
def test_a_gangs_pod_shape_reads_as_count_and_size(count, pod, text):
    assert pods_phrase(count, pod) == text


@pytest.mark.parametrize("seconds, text", [
    (7200, "2 h"), (3600, "1 h"), (900, "15 min"), (5400, "90 min"), (60, "1 min"), (90, "90 s"),
    (59, "59 s"), (0, "0 s"), (0.5, "0.5 s"),
])
def test_a_duration_reads_in_the_largest_unit_that_divides_it(seconds, text):
    assert duration(seconds) == text
