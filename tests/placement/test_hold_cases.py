"""Which nodes a long-waiting job holds (broker/engine/placement/cycle/ `_hold`): named cases, each a layout, the
starving jobs, and the hold each gets (or none), with the words of the waiting message where they matter.

Every job here has waited 10,000 s, past the 600 s after which a job that does not fit holds nodes.
"""

from __future__ import annotations

from dataclasses import replace

from broker.engine.placement import Config, schedule

from .fixtures import GPU, cluster, fabric, hard, job, queue, running, snapshot

STARVING = Config(starvation_after_s=600)


def busy(state, name: str, positions) -> None:
    """Running work of 8 GPUs on each node at `positions` of cluster `name`."""
    state.clusters[name].apply({i: {GPU: 8000} for i in positions}, {i: 1 for i in positions}, [], +1)


def old(pods: int = 8, name: str = "old", **kwargs):
    return job("q", pods=pods, submitted_at=0.0, job_id=name, **kwargs)


def holds(result) -> dict[str, tuple]:
    return {j: (h.cluster, h.hypernode, h.tier) for j, h in result.holds.items()}


def no_hypernodes(prefix: str = ""):
    """8 nodes of 8 GPUs that no HyperNode groups."""
    return fabric(prefix, leaves=1)[0], ()


def test_without_hypernodes_a_soft_job_holds_the_whole_cluster():
    s = snapshot([cluster("eu", no_hypernodes())], [queue("q")], now=10_000.0)
    busy(s, "eu", [0])
    result = schedule(s, [old()], STARVING)
    assert holds(result) == {"old": ("eu", None, None)}
    assert result.holds["old"].nodes == tuple(f"leaf-0-n{i}" for i in range(8))
    assert result.waiting["old"].message == (
        "no cluster can take it now; the 8 nodes leaf-0-n0..leaf-0-n7 of the cluster on eu are held for it because "
        "it has waited over 10 min; it waits there for running work of up to 8 GPUs to end")


def test_without_hypernodes_a_hard_job_holds_nothing():
    s = snapshot([cluster("eu", no_hypernodes())], [queue("q")], now=10_000.0)
    busy(s, "eu", [0])
    result = schedule(s, [old(pods=1, annotations=hard(1))], STARVING)
    assert result.holds == {} and result.waiting["old"].message == "no cluster can take it now"


def test_a_hypernode_is_held_before_a_whole_cluster_as_busy():
    """a: no HyperNodes; b: one leaf. Both have 64 GPUs with 8 in use: the lower tier decides, not the name."""
    s = snapshot([cluster("a", no_hypernodes("a-")), cluster("b", fabric("b-", leaves=1))], [queue("q")],
                 now=10_000.0)
    busy(s, "a", [0])
    busy(s, "b", [0])
    assert holds(schedule(s, [old()], STARVING)) == {"old": ("b", "b-leaf-0", 1)}


def test_a_cluster_whose_nodes_are_all_held_is_passed_over_for_the_next():
    s = snapshot([cluster("a", fabric("a-", leaves=1)), cluster("b", fabric("b-", leaves=1))], [queue("q")],
                 now=10_000.0)
    busy(s, "a", [0])
    busy(s, "b", [0, 1])
    result = schedule(s, [old(name="old-0"), old(name="old-1")], STARVING)
    assert holds(result) == {"old-0": ("a", "a-leaf-0", 1), "old-1": ("b", "b-leaf-0", 1)}


def test_a_cordoned_cluster_is_passed_over_however_idle():
    s = snapshot([cluster("a", fabric("a-", leaves=1), state="Cordoned"), cluster("b", fabric("b-", leaves=1))],
                 [queue("q")], now=10_000.0)
    busy(s, "b", [0])
    assert holds(schedule(s, [old()], STARVING)) == {"old": ("b", "b-leaf-0", 1)}


def test_a_hard_job_holds_a_hypernode_of_its_tier():
    s = snapshot([cluster("eu", fabric(leaves=2))], [queue("q")], now=10_000.0)
    busy(s, "eu", [0, 1, 8])
    assert holds(schedule(s, [old(annotations=hard(1))], STARVING)) == {"old": ("eu", "leaf-1", 1)}


def test_a_hard_job_no_hypernode_of_its_tier_could_hold_holds_nothing_above_it():
    """72 GPUs bound to tier 1, on leaves of 64: the spine could hold them, but the job may not use it."""
    s = snapshot([cluster("eu", fabric(leaves=2))], [queue("q")], now=10_000.0)
    busy(s, "eu", [0])
    result = schedule(s, [old(pods=9, annotations=hard(1))], STARVING)
    assert result.holds == {} and result.waiting["old"].message == "no cluster can take it now"


def test_a_leaf_of_cordoned_nodes_is_not_held_the_busy_one_is():
    nodes, hypernodes = fabric(leaves=2)
    layout = tuple(replace(n, unschedulable=True) if n.name.startswith("leaf-0-") else n for n in nodes), hypernodes
    s = snapshot([cluster("eu", layout)], [queue("q")], now=10_000.0)
    busy(s, "eu", [8])
    assert holds(schedule(s, [old()], STARVING)) == {"old": ("eu", "leaf-1", 1)}


def test_a_job_that_has_waited_exactly_the_starvation_time_holds_a_single_node_and_is_not_parked():
    """Leaves of one node each, both busy; the job has waited 600 s to the second. The words say 'is held' for one
    node; a job with a hold is not reported inadmissible (the node may drain for it)."""
    s = snapshot([cluster("eu", fabric(leaves=2, nodes_per_leaf=1))], [queue("q")], now=10_000.0)
    busy(s, "eu", [0, 1])
    result = schedule(s, [job("q", pods=1, submitted_at=9_400.0, job_id="old")], STARVING)
    assert holds(result) == {"old": ("eu", "leaf-0", 1)}
    assert result.waiting["old"].message == (
        "no cluster can take it now; node leaf-0-n0 of HyperNode leaf-0 on eu is held for it because it has waited "
        "over 10 min; it waits there for running work of up to 8 GPUs to end")
    assert result.inadmissible == frozenset()


def test_a_tenant_exactly_at_its_fair_share_is_not_above_it_its_long_waiting_job_holds_nodes():
    """Two tenants hold 8 of the 16 GPUs each: both at their fair share of one half, not above it."""
    s = snapshot([cluster("eu", fabric(leaves=2, nodes_per_leaf=1))], [queue("q"), queue("u", tenant="u")],
                 running=[running("mine", "eu", ["leaf-0-n0"]), running("theirs", "eu", ["leaf-1-n0"],
                                                                         queue_name="u", tenant="u")],
                 now=10_000.0)
    result = schedule(s, [old(pods=1)], STARVING)
    assert holds(result) == {"old": ("eu", "leaf-0", 1)}


def test_a_split_jobs_part_stopped_by_held_nodes_is_told_so():
    """Two of eu's four nodes are busy; the old job (24 GPUs) holds the spine over all four. A newer split job's
    part of 16 GPUs would fit the held nodes' free capacity: its reason names the hold, not a shortage."""
    s = snapshot([cluster("eu", fabric("eu-", leaves=2, nodes_per_leaf=2))], [queue("q")], now=10_000.0)
    busy(s, "eu", [0, 2])
    pair = job("q", parts=(("x", 1, 2, 8), ("y", 1, 2, 8)), submitted_at=9_900.0, job_id="pair",
               annotations={"archipelago.io/placement": "split"})
    result = schedule(s, [old(pods=3), pair], STARVING)
    assert holds(result) == {"old": ("eu", "eu-spine-0", 2)}
    assert result.waiting["pair"].message == "no cluster can take it now (ReplicatedJob x)"
    assert result.waiting["pair"].clusters == {"eu": (
        "needs 16 GPUs; 0 GPUs free outside the 4 nodes eu-leaf-0-n0..eu-leaf-1-n1 of HyperNode eu-spine-0 on eu, "
        "held for a job that has waited too long")}
