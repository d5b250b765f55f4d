"""The words the engine's reasons are made of (broker/engine/placement/explain.py): amounts, shortfalls,
pod shapes and durations as a tenant reads them."""

from __future__ import annotations

import pytest

from broker.engine.placement.explain import amount, duration, pods_phrase, shortfall
from broker.engine.placement.model import GPU
from broker.engine.placement.snapshot import ClusterIndex
from tests.placement.fixtures import cluster, job, node


@pytest.mark.parametrize("resource, milli, text", [
    (GPU, 1000, "1 GPU"), (GPU, 8000, "8 GPUs"), (GPU, 500, "0.5 GPUs"), (GPU, 0, "0 GPUs"),
    ("cpu", 1000, "1 CPU"), ("cpu", 64000, "64 CPUs"), ("cpu", 500, "500m CPUs"),
    ("memory", 200 * 2**30 * 1000, "200Gi of memory"),
    ("ephemeral-storage", 2**20 * 1000, "1Mi of ephemeral-storage"), ("hugepages-2Mi", 8 * 2**20 * 1000, "8Mi of hugepages-2Mi"),
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


@pytest.mark.parametrize("scarce, text", [(GPU, "4 pods of 1 GPU"), ("cpu", "4 pods of 1 GPU and 40 CPUs"),
                                          ("memory", "4 pods of 1 GPU and 1Gi of memory"), (None, "4 pods of 1 GPU")])
def test_a_gangs_pod_shape_names_the_resource_its_nodes_are_short_of_beside_its_gpus(scarce, text):
    assert pods_phrase(4, {GPU: 1000, "cpu": 40_000, "memory": 2**30 * 1000}, scarce) == text


def _part(cpu: int, gpus: int):
    return job(gpus=gpus, cpu=cpu).spec.parts[0]


def test_the_scarce_resource_is_the_one_that_limits_the_most_nodes_that_could_hold_a_pod():
    """4 GPU nodes with 16 CPUs free each, beside 20 CPU-only nodes: a pod of 1 GPU and 40 CPUs is short of CPUs
    (the CPU-only nodes could never hold it: they say nothing)."""
    gpu_nodes = [node(f"g{i}", gpus=8, cpu=64) for i in range(4)]
    index = ClusterIndex(cluster("c", ((*gpu_nodes, *(node(f"c{i}", gpus=0, cpu=64) for i in range(20))), ())))
    for i in range(4):
        index.free[i]["cpu"] = 16_000
    assert index.scarcest(_part(cpu=40, gpus=1)) == "cpu"
    for i in range(4):
        index.free[i][GPU] = 0
    assert index.scarcest(_part(cpu=1, gpus=1)) == GPU  # their GPUs taken: room for none by GPUs, 16 by CPUs
    assert index.scarcest(_part(cpu=1, gpus=16)) == GPU  # no node could ever hold one: too few GPUs on each



@pytest.mark.parametrize("seconds, text", [
    (7200, "2 h"), (3600, "1 h"), (900, "15 min"), (5400, "90 min"), (60, "1 min"), (90, "90 s"),
    (59, "59 s"), (0, "0 s"), (0.5, "0.5 s"),
])
def test_a_duration_reads_in_the_largest_unit_that_divides_it(seconds, text):
    assert duration(seconds) == text
