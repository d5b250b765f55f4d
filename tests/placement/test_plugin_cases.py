"""Each filter and score plugin asked directly (broker/engine/placement/plugins.py): named cases with the exact
reason a tenant reads, or the exact score out of 100 the cycle weighs.

The cycle's own tests see the plugins only through where a job lands; here one cluster, one request and
one candidate are enough to pin every word and every number.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.engine.jobset import on_control_planes, parse_jobset
from broker.engine.placement.decisions import Hold
from broker.engine.placement.model import HyperNode, PendingJob
from broker.engine.placement.plugins import (BinPacking, Candidate, ClusterState, ExclusiveTopology, HeldNodes,
                                             Locality, MemberAdmission, NodeEligibility, RecentEviction, Request,
                                             Reservation, Spread, TightestTier, TopologyBound)
from broker.engine.placement.snapshot import ClusterIndex

from .fixtures import GPU, cluster, fabric, hard, job, manifest, node

MAINTENANCE = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}


def index(layout=None, state="Ready", busy=()) -> ClusterIndex:
    """Cluster eu (two leaves of 8 nodes of 8 GPUs unless `layout`); the nodes at positions `busy` run 8 GPUs."""
    built = ClusterIndex(cluster("eu", layout if layout is not None else fabric(leaves=2), state=state))
    built.apply({i: {GPU: 8000} for i in busy}, {}, (), +1)
    return built


def request(pending=None, holds=None, used=frozenset(), **job_args) -> Request:
    """The whole-job request the cycle would make for `pending` (or for `job(**job_args)`)."""
    pending = pending or job(**job_args)
    spec = pending.spec
    return Request(pending, None, spec.parts, spec.requests, spec.tier_bound, holds or {}, used)


def leaf_names(leaf: int) -> tuple[str, ...]:
    return tuple(f"leaf-{leaf}-n{i}" for i in range(8))


# -- scores --------------------------------------------------------------------------------------------

def test_tightest_tier_scores_100_over_the_tier_and_0_for_a_gang_that_spans():
    eu = index(fabric(leaves=4))
    scores = {name: TightestTier().score(request(), Candidate(eu, eu.hypernodes[name]))
              for name in ("leaf-0", "spine-0", "fabric")}
    assert scores == {"leaf-0": 100.0, "spine-0": 50.0, "fabric": 100.0 / 3}
    assert TightestTier().score(request(), Candidate(eu, None)) == 0.0


def test_bin_packing_scores_how_full_the_gang_leaves_its_domain():
    """16 GPUs asked; leaf-0 (64) has 3 busy nodes. Score = 100 × (1 − GPUs left free ÷ GPUs in the domain)."""
    eu = index(busy=(0, 1, 2))
    gang = request(pods=2)
    assert BinPacking().score(gang, Candidate(eu, eu.hypernodes["leaf-0"])) == 100.0 * (1 - 24 / 64)  # 62.5
    assert BinPacking().score(gang, Candidate(eu, eu.hypernodes["leaf-1"])) == 25.0  # 48 of 64 left
    assert BinPacking().score(gang, Candidate(eu, None)) == 100.0 * (1 - 88 / 128)  # the cluster: 31.25


def test_bin_packing_rates_a_cpu_job_by_its_cpus():
    eu = index()
    cpu_only = request(parts=(("workers", 1, 4, 0),), cpu=16)  # 64 CPUs of the leaf's 512
    assert BinPacking().score(cpu_only, Candidate(eu, eu.hypernodes["leaf-1"])) == 100.0 * (1 - 448 / 512)


def test_bin_packing_scores_0_where_the_domain_has_none_of_the_resource():
    no_gpus = index(fabric(leaves=1, gpus=0))
    assert BinPacking().score(request(), Candidate(no_gpus, no_gpus.hypernodes["leaf-0"])) == 0.0
    assert BinPacking().score(request(), Candidate(no_gpus, None)) == 0.0


def test_spread_scores_half_for_emptiness_and_half_for_being_apart():
    eu = index(busy=(0, 1, 2))  # 104 of 128 GPUs free
    candidate = Candidate(eu, eu.hypernodes["leaf-1"])
    assert Spread().score(request(), candidate) == 50.0 * 104 / 128 + 50.0  # 90.625
    assert Spread().score(request(used=frozenset({"eu"})), candidate) == 50.0 * 104 / 128
    assert Spread().score(request(used=frozenset({"us"})), candidate) == 50.0 * 104 / 128 + 50.0


def test_spread_counts_no_emptiness_where_the_resource_is_missing_or_all_cordoned():
    no_gpus = index(fabric(leaves=1, gpus=0))
    assert Spread().score(request(), Candidate(no_gpus, None)) == 50.0
    cordoned = fabric(leaves=1)
    eu = index((tuple(replace(n, unschedulable=True) for n in cordoned[0]), cordoned[1]))
    assert Spread().score(request(), Candidate(eu, None)) == 50.0


def test_locality_scores_100_where_the_job_ran_before():
    eu = index()
    before = replace(job(), previous_clusters=("us", "eu"))
    assert Locality().score(request(before), Candidate(eu, None)) == 100.0
    assert Locality().score(request(replace(job(), previous_clusters=("us",))), Candidate(eu, None)) == 0.0


# -- filters that do not depend on capacity ----------------------------------------------------------------

@pytest.mark.parametrize("state, reason", [
    ("Ready", None), ("Cordoned", "cordoned"), ("Draining", "draining"), ("NotReady", "not ready (not answering)"),
    ("Pending", "not yet connected"), ("Removed", "in state Removed"),
])
def test_cluster_state_says_why_a_cluster_takes_no_new_work(state, reason):
    assert ClusterState().filter(request(), index(state=state)) == reason


def test_recent_eviction_keeps_a_job_off_the_cluster_it_did_not_start_on_until_a_time():
    eu = index()
    avoided = replace(job(), avoided={"eu": "2026-12-01T10:00:00Z"})
    assert RecentEviction().filter(request(avoided), eu) == (
        "its pods did not all become ready here within the startup timeout; avoided until 2026-12-01T10:00:00Z")
    assert RecentEviction().filter(request(replace(job(), avoided={"us": "2026-12-01T10:00:00Z"})), eu) is None


def test_member_admission_keeps_a_job_off_a_member_that_refused_its_copy_in_that_members_words():
    eu = index()
    refused = replace(job(), refused={"eu": 'admission webhook "vjobset.kb.io" denied the request: no'})
    assert MemberAdmission().filter(request(refused), eu) == (
        'its admission refused the JobSet: admission webhook "vjobset.kb.io" denied the request: no')
    assert MemberAdmission().filter(request(replace(job(), refused={"us": "no"})), eu) is None


# -- node eligibility: why no node takes a pod --------------------------------------------------------------

def with_pod_spec(**fields) -> PendingJob:
    """A one-pod job of 8 GPUs whose pod spec also has `fields` (nodeSelector, affinity)."""
    jobset = manifest()
    jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].update(fields)
    return replace(job(), spec=parse_jobset(jobset))


def test_a_cluster_without_nodes_is_said_to_have_none():
    assert NodeEligibility().filter(request(), index(((), ()))) == "no node can take a pod of workers: it has no nodes"


def test_each_nodes_first_obstacle_is_counted_in_the_order_of_its_words():
    """Per node the first obstacle: cordoned, then the selector, then a taint; six nodes, none eligible."""
    nodes = (node("a", labels={"pool": "train"}, unschedulable=True, taints=(MAINTENANCE,)),
             node("b", labels={"pool": "serve"}, taints=(MAINTENANCE,)),
             node("c", labels={"pool": "serve"}),
             node("d", labels={"pool": "train"}, taints=(MAINTENANCE,)),
             node("e", labels={"pool": "train"}, taints=(MAINTENANCE,)),
             node("f", labels={"pool": "train"}, taints=(MAINTENANCE,)))
    pending = with_pod_spec(nodeSelector={"pool": "train"})
    assert NodeEligibility().filter(request(pending), index((nodes, ()))) == (
        "no node can take a pod of workers: 1 of 6 nodes cordoned or not ready, 2 of 6 nodes do not match its node "
        "selector or required node affinity, 3 of 6 nodes have taint maintenance=true:NoSchedule it does not "
        "tolerate")
    nodes += (node("g", labels={"pool": "train"}),)
    assert NodeEligibility().filter(request(pending), index((nodes, ()))) is None


def test_a_node_named_by_the_pods_required_affinity_is_refused_for_its_taint_the_others_for_their_name():
    pinned = with_pod_spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}})
    nodes = (node("a"), node("b", taints=(MAINTENANCE,)), node("c"))
    assert NodeEligibility().filter(request(pinned), index((nodes, ()))) == (
        "no node can take a pod of workers: 2 of 3 nodes do not match its node selector or required node affinity, "
        "1 of 3 nodes have taint maintenance=true:NoSchedule it does not tolerate")


CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}


@pytest.mark.parametrize("label", ["node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"])
def test_control_plane_nodes_are_offered_to_a_privileged_tenants_pods_only_whatever_they_tolerate(label):
    """Below privileged a pod may tolerate the control plane's taint, or the node may have none: still not offered."""
    tolerant = with_pod_spec(tolerations=[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}])
    nodes = (node("cp-0", labels={label: ""}, taints=(CONTROL_PLANE_TAINT,)), node("cp-1", labels={label: ""}))
    refusal = ("no node can take a pod of workers: 2 of 2 nodes are control-plane nodes, which only a privileged "
               "tenant's pods may use")
    assert NodeEligibility().filter(request(tolerant), index((nodes, ()))) == refusal
    assert NodeEligibility().filter(request(), index((nodes, ()))) == refusal
    privileged = replace(tolerant, spec=on_control_planes(tolerant.spec))
    assert NodeEligibility().filter(request(privileged), index((nodes, ()))) is None
    assert index((nodes, ())).eligible_count(privileged.spec.parts[0]) == 2


# -- filters on free capacity and topology ------------------------------------------------------------------

def test_exclusive_topology_counts_the_free_domains_it_needs():
    eu = index()  # two leaves, each a value of the node label "leaf"
    three = request(parts=(("workers", 3, 2, 8),), exclusive="leaf")
    assert ExclusiveTopology().filter(three, eu) == (
        "workers needs 3 free leaf domains with room for 2 pods each; 2 are free")
    assert ExclusiveTopology().filter(request(parts=(("workers", 2, 2, 8),), exclusive="leaf"), eu) is None
    one_left = index(busy=range(8))
    assert ExclusiveTopology().filter(request(parts=(("workers", 2, 2, 8),), exclusive="leaf"), one_left) == (
        "workers needs 2 free leaf domains with room for 2 pods each; 1 is free")
    assert ExclusiveTopology().filter(request(pods=16), eu) is None, "a part without exclusive topology"


def test_topology_bound_needs_a_hypernode_of_the_bound_tier_with_the_gang_free():
    eu = index(busy=(0,))  # leaf-0 has 56 GPUs free, leaf-1 64
    assert TopologyBound().filter(request(pods=9), eu) is None, "soft topology is not bound"
    assert TopologyBound().filter(request(pods=8, annotations=hard(1)), eu) is None
    assert TopologyBound().filter(request(pods=9, annotations=hard(1)), eu) == (
        "needs 72 GPUs in one tier-1 HyperNode; the largest free one has 64")
    assert TopologyBound().filter(request(pods=9, annotations=hard(2)), eu) is None
    cpu_only = request(parts=(("workers", 1, 9, 0),), cpu=64, annotations=hard(1))
    assert TopologyBound().filter(cpu_only, eu) == "needs 576 CPUs in one tier-1 HyperNode; the largest free one has 512"


def test_topology_bound_says_0_when_every_hypernode_is_full_or_has_no_gpus():
    assert TopologyBound().filter(request(annotations=hard(1)), index(busy=range(16))) == (
        "needs 8 GPUs in one tier-1 HyperNode; the largest free one has 0")
    assert TopologyBound().filter(request(annotations=hard(1)), index(fabric(leaves=2, gpus=0))) == (
        "needs 8 GPUs in one tier-1 HyperNode; the largest free one has 0")


def test_topology_bound_says_a_fraction_of_a_cpu_as_kubernetes_writes_it():
    nodes, hypernodes = fabric(leaves=1, nodes_per_leaf=1, gpus=0)
    almost_full = index((tuple(replace(n, used={"cpu": 63_500}) for n in nodes), hypernodes))
    assert TopologyBound().filter(request(parts=(("workers", 1, 1, 0),), annotations=hard(1)), almost_full) == (
        "needs 1 CPU in one tier-1 HyperNode; the largest free one has 500m")


def test_a_job_that_asks_for_no_cpu_passes_the_bound_of_a_cluster_whose_cpus_are_all_taken():
    jobset = manifest(parts=(("workers", 1, 1, 0),), annotations=hard(1))
    del jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "resources"]["requests"]["cpu"]
    memory_only = request(replace(job(), spec=parse_jobset(jobset)))
    assert (memory_only.primary, memory_only.need) == ("cpu", 0)
    eu = index(fabric(leaves=1, nodes_per_leaf=2))
    eu.apply({i: {"cpu": 64_000} for i in range(2)}, {}, (), +1)
    assert TopologyBound().filter(memory_only, eu) is None
    assert BinPacking().score(memory_only, Candidate(eu, eu.hypernodes["leaf-0"])) == 100.0


def test_topology_bound_refuses_a_cluster_without_a_hypernode_that_low():
    nodes, hypernodes = fabric(leaves=2)
    spines_only = index((nodes, tuple(replace(h, nodes=nodes_of(h, hypernodes)) for h in hypernodes if h.tier > 1)))
    assert TopologyBound().filter(request(annotations=hard(1)), spines_only) == "has no HyperNode of tier 1 or lower"
    assert TopologyBound().filter(request(annotations=hard(2)), spines_only) is None
    assert TopologyBound().filter(request(annotations=hard(1)), index((nodes, ()))) == (
        "has no HyperNode of tier 1 or lower")


def nodes_of(spine, hypernodes) -> tuple[str, ...]:
    """The nodes of a spine's leaves, made its direct members (the leaves left out of the layout)."""
    return tuple(n for h in hypernodes if h.name in spine.children for n in h.nodes)


# -- the Reservation filter: nodes held for long-waiting jobs ------------------------------------------------

def held(eu: ClusterIndex, *holds: tuple[str, str | None, int | None, tuple[str, ...]]) -> dict[str, HeldNodes]:
    """Hold, as the cycle does, each (job, HyperNode, tier, nodes): their free capacity leaves the snapshot."""
    kept = HeldNodes()
    for job_id, hypernode, tier, names in holds:
        taken = {eu.position[n]: dict(eu.free[eu.position[n]]) for n in names}
        eu.apply(taken, {}, (), +1)
        free: dict[str, int] = {}
        for amounts in taken.values():
            for resource, quantity in amounts.items():
                free[resource] = free.get(resource, 0) + quantity
        kept.add(Hold(job_id, "eu", hypernode, tier, names, free, "8 GPUs"))
    return {"eu": kept}


def leaf_1_mostly_busy() -> ClusterIndex:
    """Leaf-0 free (to be held), 7 of leaf-1's 8 nodes busy: 8 GPUs free outside leaf-0."""
    return index(busy=range(8, 15))


HELD_LEAF_0 = "the 8 nodes leaf-0-n0..leaf-0-n7 of HyperNode leaf-0 on eu, held for a job that has waited too long"


@pytest.mark.parametrize("pods, reason", [
    (1, None),  # the 8 GPUs free outside the hold are enough
    (2, f"needs 16 GPUs; 8 GPUs free outside {HELD_LEAF_0}"),
    (9, f"needs 72 GPUs; 8 GPUs free outside {HELD_LEAF_0}"),  # exactly what the hold would give back
    (10, None),  # even with the held nodes it would not fit: the holds are not what stops it
])
def test_a_soft_job_is_told_when_held_nodes_are_what_keeps_it_out(pods, reason):
    eu = leaf_1_mostly_busy()
    holds = held(eu, ("old", "leaf-0", 1, leaf_names(0)))
    assert Reservation().filter(request(holds=holds, pods=pods), eu) == reason


@pytest.mark.parametrize("pods, reason", [
    (1, None),  # leaf-1's free node holds it
    (2, f"needs 16 GPUs in one tier-1 HyperNode; {HELD_LEAF_0}"),
    (8, f"needs 64 GPUs in one tier-1 HyperNode; {HELD_LEAF_0}"),  # exactly the held leaf
    (9, None),  # not even the held leaf would hold it
])
def test_a_hard_job_is_told_when_a_held_hypernode_of_its_tier_is_what_keeps_it_out(pods, reason):
    eu = leaf_1_mostly_busy()
    holds = held(eu, ("old", "leaf-0", 1, leaf_names(0)))
    assert Reservation().filter(request(holds=holds, pods=pods, annotations=hard(1)), eu) == reason


def test_a_hold_above_the_jobs_tier_or_of_the_whole_cluster_does_not_keep_a_hard_job_out():
    for hypernode, tier in (("spine-0", 2), (None, None)):
        eu = leaf_1_mostly_busy()
        holds = held(eu, ("old", hypernode, tier, leaf_names(0)))
        assert Reservation().filter(request(holds=holds, pods=2, annotations=hard(1)), eu) is None
    eu = leaf_1_mostly_busy()
    holds = held(eu, ("old", "spine-0", 2, leaf_names(0)))
    assert Reservation().filter(request(holds=holds, pods=2, annotations=hard(2)), eu) == (
        "needs 16 GPUs in one tier-2 HyperNode; the 8 nodes leaf-0-n0..leaf-0-n7 of HyperNode spine-0 on eu, "
        "held for a job that has waited too long")


def test_a_hard_job_counts_what_the_held_hypernode_has_free_beside_the_hold():
    """leaf-0: 4 nodes held, one free, three busy; leaf-1: one free. Tier 1 has 8 GPUs free, the spine 16."""
    eu = index(busy=(5, 6, 7, *range(9, 16)))
    holds = held(eu, ("old", "leaf-0", 1, leaf_names(0)[:4]))
    held_half = ("the 4 nodes leaf-0-n0..leaf-0-n3 of HyperNode leaf-0 on eu, held for a job that has waited "
                 "too long")
    for pods, reason in ((2, f"needs 16 GPUs in one tier-1 HyperNode; {held_half}"),
                         (5, f"needs 40 GPUs in one tier-1 HyperNode; {held_half}"), (6, None)):
        assert Reservation().filter(request(holds=holds, pods=pods, annotations=hard(1)), eu) == reason


def test_holds_on_nodes_without_gpus_do_not_keep_a_gpu_job_out():
    """A CPU job's hold on a cluster without GPUs: Capacity tells the GPU job why, not the holds."""
    eu = index(fabric(leaves=1, gpus=0))
    holds = held(eu, ("old", "leaf-0", 1, leaf_names(0)[:4]))
    assert Reservation().filter(request(holds=holds), eu) is None
    assert Reservation().filter(request(holds=holds, annotations=hard(1)), eu) is None


def test_a_soft_and_a_hard_request_of_the_same_need_get_their_own_reasons():
    """Node a held; node b has 2m CPUs free: a job of 3m CPUs, soft then bound to tier 2."""
    nodes = (node("a", gpus=0), replace(node("b", gpus=0), used={"cpu": 63_998}))
    eu = index((nodes, (HyperNode("leaf", 1, nodes=("a", "b")),)))
    holds = held(eu, ("old", "leaf", 1, ("a",)))
    held_a = "node a of HyperNode leaf on eu, held for a job that has waited too long"
    soft = request(holds=holds, parts=(("workers", 1, 1, 0),), cpu="3m")
    assert Reservation().filter(soft, eu) == f"needs 3m CPUs; 2m CPUs free outside {held_a}"
    bound = request(holds=holds, parts=(("workers", 1, 1, 0),), cpu="3m", annotations=hard(2))
    assert Reservation().filter(bound, eu) == f"needs 3m CPUs in one tier-2 HyperNode; {held_a}"


def test_a_hold_on_another_cluster_says_nothing_here():
    eu = leaf_1_mostly_busy()
    holds = held(eu, ("old", "leaf-0", 1, leaf_names(0)))
    assert Reservation().filter(request(holds={"us": holds["eu"]}, pods=2), eu) is None


def test_the_first_hold_is_named_and_the_others_counted():
    eu = index(busy=range(8, 16))
    holds = held(eu, ("old", "leaf-0", 1, leaf_names(0)[:4]), ("older", "leaf-0", 1, leaf_names(0)[4:6]))
    first = ("the 4 nodes leaf-0-n0..leaf-0-n3 of HyperNode leaf-0 on eu, held for a job that has waited too "
             "long")
    assert Reservation().filter(request(holds=holds, pods=3), eu) == (
        f"needs 24 GPUs; 16 GPUs free outside {first}, and nodes held for 1 other job")
    holds["eu"].add(Hold("oldest", "eu", "leaf-0", 1, leaf_names(0)[6:], {GPU: 16000}, "0 GPUs"))
    assert Reservation().filter(request(holds=holds, pods=4), eu) == (
        f"needs 32 GPUs; 16 GPUs free outside {first}, and nodes held for 2 other jobs")


def test_a_reason_given_once_is_given_again_for_the_same_shortfall_and_anew_after_a_new_hold():
    eu = index(busy=range(4, 15))  # leaf-0-n0..n3 free (to be held), 8 GPUs free elsewhere
    holds = held(eu, ("old", "leaf-0", 1, leaf_names(0)[:4]))
    two = request(holds=holds, pods=2)
    alone = "needs 16 GPUs; 8 GPUs free outside the 4 nodes leaf-0-n0..leaf-0-n3 of HyperNode leaf-0 on eu, " \
            "held for a job that has waited too long"
    assert Reservation().filter(two, eu) == alone
    assert Reservation().filter(request(holds=holds, pods=2), eu) == alone
    assert Reservation().filter(request(holds=holds, pods=3), eu) == alone.replace("needs 16", "needs 24")
    assert Reservation().filter(request(holds=holds, pods=2, annotations=hard(1)), eu) == (
        "needs 16 GPUs in one tier-1 HyperNode; the 4 nodes leaf-0-n0..leaf-0-n3 of HyperNode leaf-0 on eu, "
        "held for a job that has waited too long")
    holds["eu"].add(Hold("older", "eu", "leaf-0", 1, leaf_names(0)[4:], {GPU: 32000}, "0 GPUs"))
    assert Reservation().filter(two, eu) == alone + ", and nodes held for 1 other job"
