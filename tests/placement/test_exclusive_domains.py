"""Exclusive topology (broker/engine/placement/snapshot.py `ClusterIndex.free_domains`, `bind`, `apply`): a domain is
free only while no placement touches it; a job that holds one exclusively locks all its nodes, and giving the
placement back frees them again, however many placements came and went on them.

Four nodes of 8 GPUs: n0 in rack c, n1 in rack b, n2 and n3 in rack a.
"""

from __future__ import annotations

from dataclasses import replace

from broker.engine.jobset import POD_SLOT, PartSpec
from broker.engine.placement.snapshot import ClusterIndex

from .fixtures import GPU, cluster, node, queue, running, snapshot

RACKS = {"n0": "c", "n1": "b", "n2": "a", "n3": "a"}


def eu():
    return cluster("eu", layout=(tuple(node(name, labels={"rack": rack}) for name, rack in RACKS.items()), ()))


def one_gpu_pods(replicas=1, parallelism=1, exclusive="rack") -> PartSpec:
    return PartSpec("workers", replicas, parallelism, None, {GPU: 1000, POD_SLOT: 1000}, exclusive_topology=exclusive)


def free_racks(index: ClusterIndex) -> list[str]:
    return [value for _, value, _ in index.free_domains(one_gpu_pods())]


def test_free_domains_come_smallest_first_ties_by_name():
    """Racks b and c have room for 8 one-GPU pods, rack a for 16; n0 (rack c) sorts before n1 (rack b)."""
    assert free_racks(ClusterIndex(eu())) == ["b", "c", "a"]


def test_a_domain_any_placement_touches_is_not_free_until_every_one_is_given_back():
    index = ClusterIndex(eu())
    index.apply({0: {GPU: 2000}}, {0: 2}, (), +1)  # two placements on n0, of 2 and 3 pods
    index.apply({0: {GPU: 3000}}, {0: 3}, (), +1)
    assert free_racks(index) == ["b", "a"]
    index.apply({0: {GPU: 2000}}, {0: 2}, (), -1)
    assert free_racks(index) == ["b", "a"]
    index.apply({0: {GPU: 3000}}, {0: 3}, (), -1)
    assert free_racks(index) == ["b", "c", "a"]


def test_a_domain_held_exclusively_takes_no_other_pod_even_on_its_idle_nodes_until_given_back():
    index = ClusterIndex(eu())
    plain = [one_gpu_pods(exclusive=None)]
    index.apply({2: {GPU: 8000}}, {2: 1}, [("rack", "a")], +1)  # one pod on n2 holds rack a, n3 included
    assert index.bind(plain, [3]) is None
    assert free_racks(index) == ["b", "c"]
    index.apply({2: {GPU: 8000}}, {2: 1}, [("rack", "a")], -1)
    assert index.bind(plain, [3]) is not None
    assert free_racks(index) == ["b", "c", "a"]


def test_a_part_gets_its_domains_when_exactly_as_many_are_free_as_it_has_replicas():
    binding = ClusterIndex(eu()).bind([one_gpu_pods(replicas=3)], range(4))
    assert binding is not None and sorted(binding.domains) == [("rack", "a"), ("rack", "b"), ("rack", "c")]


def test_a_running_exclusive_placement_holds_its_whole_domain_in_the_next_cycles_snapshot():
    held = replace(running("old", "eu", ["n2"]), exclusive_topology="rack")
    index = snapshot([eu()], [queue("q")], running=[held]).clusters["eu"]
    assert index.bind([one_gpu_pods(exclusive=None)], [3]) is None, "n3 is in rack a, which job old holds alone"
    assert free_racks(index) == ["b", "c"]


def test_a_placement_being_deleted_holds_its_nodes_but_no_longer_counts_toward_its_queue():
    leaving = replace(running("old", "eu", ["n0"]), charged=False)
    s = snapshot([eu()], [queue("q")], running=[leaving])
    assert s.queues["q"].usage == {} and s.tenant_usage["t"] == {}
    assert s.clusters["eu"].free_total[GPU] == 24_000
