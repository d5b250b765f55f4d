"""A resource a node, a HyperNode or a cluster does not have counts as none free (broker/engine/placement/snapshot.py,
explain.py): a GPU pod never lands on a CPU-only node, the reason quotes 0 free, and a pod that asks for no CPU
nor GPU is placed by what it does ask for."""

from __future__ import annotations

from dataclasses import replace

from broker.engine.jobset import POD_SLOT, PartSpec
from broker.engine.placement.explain import shortfall
from broker.engine.placement.snapshot import ClusterIndex, fits

from .fixtures import GPU, GiB, cluster, fabric, node


def test_the_shortfall_of_a_resource_nowhere_free_quotes_0_free():
    assert shortfall({GPU: 8_000, "cpu": 1_000}, {"cpu": 64_000}) == (GPU, 8_000, 0)
    assert shortfall({"cpu": 1}, {}) == ("cpu", 1, 0), "even one millicore is short where there is none"
    assert not fits({}, {"cpu": 1})


def test_gpu_pods_skip_the_cpu_only_nodes_of_a_mixed_cluster():
    mixed = ClusterIndex(cluster("eu", layout=((node("a-cpu", gpus=0), node("b-gpu")), ())))
    gpu_pod = PartSpec("workers", 1, 1, None, {GPU: 8_000, "cpu": 1_000, POD_SLOT: 1000})
    assert mixed.room(0, gpu_pod.pod_requests, None) == 0
    assert mixed.room(0, {GPU: 1, POD_SLOT: 1000}, None) == 0, "not even a thousandth of a GPU"
    assert mixed.bind([gpu_pod], [0, 1]).pods == {1: {"workers": 1}}


def test_a_node_that_states_no_pod_limit_takes_any_number_of_pods():
    tiny = PartSpec("workers", 1, 2_000, None, {"cpu": 1, POD_SLOT: 1000})  # 2,000 pods of 1m CPU
    binding = ClusterIndex(cluster("eu", layout=((node("n0", gpus=0),), ()))).bind([tiny], [0])
    assert binding is not None and binding.pods == {0: {"workers": 2_000}}


def test_a_pod_that_asks_for_no_cpu_nor_gpu_fits_the_tightest_hypernode_even_with_every_cpu_taken():
    """leaf-0's CPUs are all in use, its memory is not: a memory-only gang goes there, not to the idle leaf-1."""
    nodes, hypernodes = fabric(leaves=2, nodes_per_leaf=2)
    nodes = tuple(replace(n, used={"cpu": 64_000}) if n.name.startswith("leaf-0") else n for n in nodes)
    memory_only = PartSpec("workers", 1, 2, None, {"memory": 16 * GiB, POD_SLOT: 1000})
    fit = ClusterIndex(cluster("eu", (nodes, hypernodes))).search([memory_only], memory_only.requests, 1, 10, True)
    assert fit is not None and fit.hypernode.name == "leaf-0"
