"""Named cases with expected outcomes: one behaviour of the engine each."""

from dataclasses import replace

from broker.engine.placement import Config, Waiting, dry_run, schedule

from .fixtures import GPU, cluster, fabric, hard, job, n_jobs, node, queue, running, snapshot


def only(result):
    (placement,) = result.placements
    return placement


def test_gang_goes_to_the_tightest_tier_that_holds_it():
    for pods, tier in ((4, 1), (8, 1), (9, 2), (16, 2), (17, 3), (32, 3)):
        s = snapshot([cluster("eu")], [queue("q")])
        assert only(schedule(s, [job(pods=pods)])).tier == tier


def test_hard_bound_makes_the_job_wait_with_the_largest_free_domain():
    s = snapshot([cluster("eu")], [queue("q")])
    result = schedule(s, [job(pods=12, annotations=hard(1))])
    assert not result.placements
    (waiting,) = result.waiting.values()
    assert waiting.clusters["eu"] == "needs 96 GPUs in one tier-1 HyperNode; the largest free one has 64"


def test_soft_gang_spans_the_cluster_when_no_single_hypernode_fits():
    nodes, hypernodes = fabric(leaves=2, leaves_per_spine=1)  # two spines, no common fabric parent used
    hypernodes = tuple(h for h in hypernodes if h.tier < 3)
    s = snapshot([cluster("eu", (nodes, hypernodes))], [queue("q")])
    placement = only(schedule(s, [job(pods=12)]))
    assert placement.hypernode is None and len(placement.node_names()) == 12


def test_cordoned_not_ready_crd_selector_and_taints_are_explained_per_cluster():
    clusters = [cluster("a-cordoned", state="Cordoned"), cluster("b-down", state="NotReady"),
                cluster("c-nocrd", jobset_crd=False), cluster("d-ap", labels={"region": "ap"}),
                cluster("e-tainted", labels={"region": "eu"}, taints=[{"key": "gpu", "value": "h100", "effect": "NoSchedule"}])]
    s = snapshot(clusters, [queue("q")])
    pending = job(annotations={"archipelago.io/cluster-selector": "region in (eu, us)"})
    reasons = schedule(s, [pending]).waiting[pending.id].clusters
    assert reasons == {"a-cordoned": "cordoned", "b-down": "not ready (not answering)",
                       "c-nocrd": "has no JobSet CRD installed",
                       "d-ap": "labels do not match the cluster selector region in (eu,us)",
                       "e-tainted": "has taint gpu=h100:NoSchedule that workers does not tolerate"}


def test_a_toleration_opens_a_tainted_cluster():
    taint = {"key": "gpu", "value": "h100", "effect": "NoSchedule"}
    s = snapshot([cluster("eu", taints=[taint])], [queue("q")])
    tolerant = job(tolerations=[{"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}])
    assert only(schedule(s, [tolerant])).cluster == "eu"


def test_capacity_reason_names_the_short_resource():
    s = snapshot([cluster("eu")], [queue("q")])
    pending = job(pods=40)
    assert schedule(s, [pending]).waiting[pending.id].clusters["eu"] == "needs 320 GPUs; 256 GPUs free"


def test_exclusive_topology_gives_each_child_job_a_domain_of_its_own():
    layout = fabric(leaves=2, node_labels=lambda leaf, i: {"block": f"{leaf}-b{i // 2}"})  # 8 blocks of 2 nodes
    s = snapshot([cluster("eu", layout)], [queue("q")])
    slices = job(parts=(("workers", 4, 2, 8),), exclusive="block")
    placement = only(schedule(s, [slices]))
    assert len(placement.exclusive_domains) == 4
    blocks = {n.rsplit("-n", 1)[0] + f"-b{int(n.rsplit('-n', 1)[1]) // 2}" for n in placement.node_names()}
    assert len(blocks) == 4
    # the next job may not share those blocks, even with room on them
    other = job(pods=1, gpus=1)
    second = only(schedule(s, [other]))
    assert not set(second.node_names()) & set(placement.node_names())


def test_exclusive_topology_waits_when_too_few_domains_are_free():
    layout = fabric(leaves=1, node_labels=lambda leaf, i: {"block": f"b{i // 4}"})  # 2 blocks
    s = snapshot([cluster("eu", layout)], [queue("q")])
    pending = job(parts=(("workers", 3, 2, 8),), exclusive="block")
    reason = schedule(s, [pending]).waiting[pending.id].clusters["eu"]
    assert reason == "workers needs 3 free block domains with room for 2 pods each; 2 are free"


def test_split_job_parts_go_to_different_clusters_when_none_holds_all():
    s = snapshot([cluster("eu", fabric(leaves=1)), cluster("us", fabric(leaves=1))], [queue("q")])
    split = job(parts=(("a", 1, 8, 8), ("b", 1, 8, 8)), annotations={"archipelago.io/placement": "split"})
    result = schedule(s, [split])
    assert sorted((p.part, p.cluster) for p in result.placements) in (
        [("a", "eu"), ("b", "us")], [("a", "us"), ("b", "eu")])


def test_split_job_places_no_part_if_one_part_cannot_go_anywhere():
    s = snapshot([cluster("eu", fabric(leaves=1))], [queue("q")])
    split = job(parts=(("a", 1, 8, 8), ("b", 1, 8, 8)), annotations={"archipelago.io/placement": "split"})
    result = schedule(s, [split])
    assert not result.placements and "ReplicatedJob b" in result.waiting[split.id].message
    assert only(schedule(s, [job(pods=8)])).cluster == "eu"  # part a's hold was given back


def test_whole_job_stays_in_one_cluster():
    s = snapshot([cluster("eu", fabric(leaves=1)), cluster("us", fabric(leaves=1))], [queue("q")])
    whole = job(parts=(("a", 1, 8, 8), ("b", 1, 8, 8)))
    assert not schedule(s, [whole]).placements


def test_quota_reason_in_words():
    s = snapshot([cluster("eu")], [queue("research", quota=64, borrow=0)])
    pending = n_jobs("research", 9, gpus=8)
    result = schedule(s, pending)
    assert len(result.placements) == 8
    assert result.waiting[pending[-1].id].message == (
        "queue research is at its quota of 64 GPUs and may borrow at most 0 GPUs; this job needs 8 GPUs above it")


def test_borrowing_from_an_idle_sibling_queue_up_to_the_limit():
    s = snapshot([cluster("eu")], [queue("a", quota=16, borrow=16), queue("b", quota=64)])
    result = schedule(s, n_jobs("a", 6, gpus=8))
    assert len(result.placements) == 4  # 16 nominal + 16 borrowed


def full_cluster_with_victims():
    nodes, hypernodes = fabric(leaves=1)
    names = [n.name for n in nodes]
    victims = [running(f"low-{i}", "eu", [names[i]], priority=1, started_at=float(i)) for i in range(8)]
    return cluster("eu", (nodes, hypernodes)), victims


def test_preemption_evicts_the_fewest_lowest_priority_most_recent():
    eu, victims = full_cluster_with_victims()
    victims[0] = running("low-0", "eu", [victims[0].node_usage.keys().__iter__().__next__()], priority=0)
    s = snapshot([eu], [queue("q", preemption="LowerPriority")], running=victims)
    urgent = job(pods=2, priority=5)
    result = schedule(s, [urgent])
    assert only(result).job_id == urgent.id
    # low-0 has the lowest priority; then the most recently started of priority 1 is low-7
    assert sorted(p.job_id for p in result.preemptions) == ["low-0", "low-7"]


def test_no_preemption_without_the_policy_or_across_tenants():
    eu, victims = full_cluster_with_victims()
    for policy, tenant in (("Never", "t"), ("LowerPriority", "other")):
        s = snapshot([eu], [queue("q", preemption=policy, tenant=tenant)], running=victims)
        result = schedule(s, [job(pods=1, priority=5, tenant=tenant)])
        assert not result.placements and not result.preemptions


def test_dry_run_answers_without_changing_the_snapshot():
    s = snapshot([cluster("eu"), cluster("us", state="Cordoned")], [queue("q")])
    answer = dry_run(s, job(pods=4))
    assert answer.placements[0].cluster == "eu" and answer.waiting is None
    assert {v.cluster: (v.score is not None, v.reason) for v in answer.clusters} == {
        "eu": (True, ""), "us": (False, "cordoned")}
    fresh = snapshot([cluster("eu"), cluster("us", state="Cordoned")], [queue("q")])
    assert [c.free_total for c in s.clusters.values()] == [c.free_total for c in fresh.clusters.values()]
    assert not any(s.queues["q"].usage.values())


def test_dry_run_of_a_preemption_restores_the_victims():
    eu, victims = full_cluster_with_victims()
    s = snapshot([eu], [queue("q", preemption="LowerPriority")], running=victims)
    before = dict(s.clusters["eu"].free_total)
    answer = dry_run(s, job(pods=1, priority=5))
    assert answer.preemptions and s.clusters["eu"].free_total == before


def test_locality_prefers_the_cluster_the_job_ran_on():
    s = snapshot([cluster("eu"), cluster("us")], [queue("q")])
    pending = replace(job(pods=4), previous_clusters=("us",))
    assert only(schedule(s, [pending])).cluster == "us"


def test_bin_packing_fills_the_partly_used_leaf_first():
    nodes, hypernodes = fabric(leaves=2, leaves_per_spine=2)
    nodes = tuple(node(n.name, used_gpus=8, labels=n.labels) if n.name.startswith("leaf-1-n") and n.name[-1] in "0123"
                  else n for n in nodes)
    s = snapshot([cluster("eu", (nodes, hypernodes))], [queue("q")])
    assert only(schedule(s, [job(pods=4)])).hypernode == "leaf-1"


def test_placement_counts_every_pod_on_a_node():
    s = snapshot([cluster("eu")], [queue("q")])
    placement = only(schedule(s, [job(pods=3)]))
    assert len(placement.node_names()) == 3 and set(placement.node_usage) == set(placement.node_names())
    assert sum(a.pods for a in placement.assignments) == 3


def test_unknown_queue_is_a_reason_not_an_error():
    s = snapshot([cluster("eu")], [queue("q")])
    stray = job("nope")
    assert schedule(s, [stray]).waiting[stray.id].message == "queue nope does not exist"


def test_disabled_filter_is_not_applied():
    s = snapshot([cluster("eu", jobset_crd=False)], [queue("q")])
    config = Config(filters=tuple(f for f in Config().filters if f != "JobSetCRD"))
    assert only(schedule(s, [job()], config)).cluster == "eu"


def half_busy(prefix: str, leaves: int):
    """A fabric whose every node already runs 4 of its 8 GPUs for someone else."""
    nodes, hypernodes = fabric(prefix, leaves=leaves)
    return tuple(replace(n, used={GPU: 4000}) for n in nodes), hypernodes


def leaf_nodes(prefix: str, leaf: int) -> tuple[str, ...]:
    return tuple(f"{prefix}leaf-{leaf}-n{i}" for i in range(8))


def test_starving_jobs_hold_one_hypernode_each_and_small_jobs_run_beside_them():
    """Issue 11, case 3: two clusters each half idle, two starving 64-GPU jobs, ten 1-GPU jobs."""
    s = snapshot([cluster("a", half_busy("a-", 4)), cluster("b", half_busy("b-", 4))], [queue("q"), queue("r")],
                 now=10_000.0)
    big = [job("q", pods=8, gpus=8, submitted_at=float(k), job_id=f"big-{k}") for k in range(2)]
    small = [job("r", pods=1, gpus=1, submitted_at=9_990.0 + k) for k in range(10)]
    result = schedule(s, big + small, Config(starvation_after_s=600))
    assert sorted(p.job_id for p in result.placements) == sorted(j.id for j in small)
    assert {p.cluster for p in result.placements} == {"a"}, "the cluster with the holds still takes work"
    assert {j: (h.cluster, h.hypernode, h.nodes) for j, h in result.holds.items()} == {
        "big-0": ("a", "a-leaf-0", leaf_nodes("a-", 0)), "big-1": ("a", "a-leaf-1", leaf_nodes("a-", 1))}
    held = {n for h in result.holds.values() for n in h.nodes}
    assert not held & {a.node for p in result.placements for a in p.assignments}
    assert result.waiting["big-0"].message == (
        "no cluster can take it now; the 8 nodes a-leaf-0-n0..a-leaf-0-n7 of HyperNode a-leaf-0 on a are held "
        "for it because it has waited over 10 min; it waits there for running work of up to 32 GPUs to end")


def test_a_job_that_needs_held_nodes_waits_and_is_told_for_whom():
    s = snapshot([cluster("eu", fabric(leaves=1))], [queue("q"), queue("r")], now=10_000.0)
    s.clusters["eu"].apply({0: {GPU: 8000}}, {0: 1}, [], +1)  # one node busy: the big job does not fit yet
    big = job("q", pods=8, submitted_at=0.0)
    small = job("r", pods=1, submitted_at=9_999.0)
    result = schedule(s, [small, big], Config(starvation_after_s=600))
    assert not result.placements
    assert (result.holds[big.id].hypernode, result.holds[big.id].nodes) == ("leaf-0", leaf_nodes("", 0))
    assert result.waiting[small.id].clusters["eu"] == (
        "needs 8 GPUs; 0 GPUs free outside the 8 nodes leaf-0-n0..leaf-0-n7 of HyperNode leaf-0 on eu, "
        "held for a job that has waited too long")


def test_a_hard_job_kept_out_of_a_held_hypernode_is_told_so():
    s = snapshot([cluster("eu", half_busy("", 2))], [queue("q"), queue("r")], now=10_000.0)
    big = job("q", pods=8, submitted_at=0.0)
    tight = job("r", pods=1, gpus=4, submitted_at=9_999.0, annotations=hard(1))
    s.clusters["eu"].apply({i: {GPU: 4000} for i in range(8, 16)}, {}, [], +1)  # leaf-1 full
    result = schedule(s, [tight, big], Config(starvation_after_s=600))
    assert not result.placements and result.holds[big.id].hypernode == "leaf-0"
    assert result.waiting[tight.id].clusters["eu"] == (
        "needs 4 GPUs in one tier-1 HyperNode; the 8 nodes leaf-0-n0..leaf-0-n7 of HyperNode leaf-0 on eu, "
        "held for a job that has waited too long")


def test_each_starving_job_holds_one_set_of_its_own_and_prefers_the_least_busy():
    layout = fabric(leaves=4)
    s = snapshot([cluster("eu", layout)], [queue("q")], now=10_000.0)
    busy = {0: 6, 1: 2, 2: 4, 3: 4}  # GPUs in use on every node of each leaf
    s.clusters["eu"].apply({i: {GPU: busy[i // 8] * 1000} for i in range(32)}, {}, [], +1)
    starving = [job("q", pods=8, submitted_at=float(k), job_id=f"old-{k}") for k in range(5)]
    result = schedule(s, starving, Config(starvation_after_s=600))
    assert not result.placements
    assert [(j, h.hypernode) for j, h in sorted(result.holds.items())] == [
        ("old-0", "leaf-1"), ("old-1", "leaf-2"), ("old-2", "leaf-3"), ("old-3", "leaf-0")]
    assert "held for it" not in result.waiting["old-4"].message, "nothing is left to hold: no hold, no claim"


def test_only_the_oldest_starving_jobs_get_holds_each_cycle():
    """Every hold idles nodes: beyond `max_holds` a starving job that does not fit waits without one."""
    layout = fabric(leaves=4)
    s = snapshot([cluster("eu", layout)], [queue("q")], now=10_000.0)
    s.clusters["eu"].apply({i: {GPU: 4000} for i in range(32)}, {}, [], +1)
    starving = [job("q", pods=8, submitted_at=float(k), job_id=f"old-{k}") for k in range(3)]
    result = schedule(s, starving, Config(starvation_after_s=600, max_holds=2))
    assert sorted(result.holds) == ["old-0", "old-1"]
    assert "held for it" not in result.waiting["old-2"].message


def test_a_starving_job_that_fits_is_simply_placed():
    s = snapshot([cluster("eu", half_busy("", 2))], [queue("q")], now=10_000.0)
    old = job("q", pods=8, gpus=4, submitted_at=0.0)
    result = schedule(s, [old], Config(starvation_after_s=600))
    assert only(result).job_id == old.id and result.holds == {}


def test_holds_last_one_cycle():
    s = snapshot([cluster("eu", half_busy("", 2))], [queue("q"), queue("r")], now=10_000.0)
    before = [dict(f) for f in s.clusters["eu"].free]
    big = job("q", pods=8, submitted_at=0.0)
    first = schedule(s, [big], Config(starvation_after_s=600))
    assert first.holds[big.id].hypernode == "leaf-0"
    assert [dict(f) for f in s.clusters["eu"].free] == before, "the held capacity is given back"
    small = job("r", pods=2, gpus=4, submitted_at=9_999.0)
    assert only(schedule(s, [small])).hypernode == "leaf-0", "without the starving job, nothing is held"
    after = [dict(f) for f in s.clusters["eu"].free]
    answer = dry_run(s, big, Config(starvation_after_s=600))
    assert "HyperNode leaf-1 on eu are held for it" in answer.waiting.message, "recomputed: leaf-1 is now less busy"
    assert [dict(f) for f in s.clusters["eu"].free] == after and not any(s.clusters["eu"].locks)


def test_turning_the_reservation_filter_off_turns_holds_off():
    s = snapshot([cluster("eu", half_busy("", 2))], [queue("q"), queue("r")], now=10_000.0)
    big = job("q", pods=8, submitted_at=0.0)
    small = job("r", pods=1, gpus=1, submitted_at=9_999.0)
    config = Config(starvation_after_s=600, filters=tuple(f for f in Config().filters if f != "Reservation"))
    result = schedule(s, [big, small], config)
    assert result.holds == {} and only(result).job_id == small.id
    assert result.waiting[big.id].message == "no cluster can take it now"


def test_the_engine_imports_no_io_library():
    import subprocess
    import sys
    code = ("import sys, broker.engine.placement, broker.engine.jobset; "
            "print(sorted(m for m in ('sqlalchemy', 'fastapi', 'kubernetes') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_between_queues_alike_but_for_their_priority_the_higher_queue_priority_goes_first():
    s = snapshot([cluster("eu", fabric(leaves=1, nodes_per_leaf=1))], [queue("low"), queue("high", priority=5)])
    early, late = job("low", gpus=8, submitted_at=1.0), job("high", gpus=8, submitted_at=2.0)
    assert only(schedule(s, [early, late])).job_id == late.id


def test_among_long_waiting_jobs_submitted_together_one_within_its_nominal_quota_goes_before_one_that_borrows():
    """Both have waited past starvation_after_s since the same second; a's tenant holds nothing and its job must
    borrow (queue 'borrows' has no quota of its own, 'lends' 8 GPUs unused); b's tenant holds 8 GPUs, its queue
    has no quota. One node is free: b's job goes first."""
    eu = cluster("eu", fabric(leaves=1, nodes_per_leaf=2))
    queues = [queue("lends", tenant="a", quota=8), queue("borrows", tenant="a", quota=0), queue("plain", tenant="b")]
    s = snapshot([eu], queues, running=[running("b-work", "eu", ["leaf-0-n0"], queue_name="plain", tenant="b")],
                 now=10_000.0)
    borrowing, plain = job("borrows", gpus=8, tenant="a", submitted_at=0.0), job("plain", gpus=8, tenant="b",
                                                                               submitted_at=0.0)
    result = schedule(s, [borrowing, plain])
    assert only(result).job_id == plain.id
    assert result.order[0] == plain.id


def test_a_job_of_a_queue_that_does_not_exist_waits_and_says_so():
    s = snapshot([cluster("eu")], [queue("q")])
    lost = job("nope")
    result = schedule(s, [lost])
    assert result.order == (lost.id,)
    assert result.waiting == {lost.id: Waiting(lost.id, "queue nope does not exist", cause="no queue")}


def test_the_parts_of_a_split_job_keep_its_hard_tier_bound():
    """Two clusters with 8 GPUs free in each of their two leaves: each part (16 GPUs) would fit a spine, not a leaf."""
    clusters = [cluster(n, fabric(f"{n}-", leaves=2, nodes_per_leaf=2)) for n in ("a", "b")]
    s = snapshot(clusters, [queue("q")], running=[running(f"{n}{l}", n, [f"{n}-leaf-{l}-n0"]) for n in "ab"
                                                  for l in (0, 1)])
    pair = job(parts=(("x", 1, 2, 8), ("y", 1, 2, 8)), annotations={"archipelago.io/placement": "split", **hard(1)})
    result = schedule(s, [pair])
    assert result.placements == () and pair.id in result.waiting


def test_a_domain_taken_exclusively_is_closed_to_the_next_jobs_of_the_same_cycle():
    """Leaves of one node; the exclusive job takes 4 GPUs of leaf-0's node. The next job (1 GPU) would pack there,
    but the domain is the first job's alone."""
    s = snapshot([cluster("eu", fabric(leaves=2, nodes_per_leaf=1))], [queue("q")])
    alone = job(parts=(("workers", 1, 1, 4),), exclusive="leaf", submitted_at=1.0)
    small = job(gpus=1, submitted_at=2.0)
    placed = {p.job_id: p.node_names() for p in schedule(s, [alone, small]).placements}
    assert placed == {alone.id: ("leaf-0-n0",), small.id: ("leaf-1-n0",)}


def test_each_jobs_place_in_line_reads_its_own_demand():
    """Queue a's head has waited long (it goes first) and fits nowhere; a's next job asks 8 GPUs, b's 32: a's goes
    before b's, as its tenant would hold less once admitted, though the head's 80 GPUs would have put it after."""
    s = snapshot([cluster("eu", fabric(leaves=1))], [queue("a", tenant="ta"), queue("b", tenant="tb")], now=9_500.0)
    big = job("a", gpus=8, pods=10, tenant="ta", submitted_at=0.0)
    small, medium = job("a", gpus=8, tenant="ta", submitted_at=9_000.0), job("b", gpus=8, pods=4, tenant="tb",
                                                                            submitted_at=9_000.0)
    result = schedule(s, [big, small, medium], Config(max_holds=0))
    assert result.order == (big.id, small.id, medium.id)


def test_a_job_goes_past_the_members_that_refused_it_and_says_so_for_each():
    """Its copy refused by eu's admission (a webhook, a policy, a quota), it goes to us, emptier or not."""
    s = snapshot([cluster("eu"), cluster("us")], [queue("q")])
    refused = replace(job(gpus=8), refused={"eu": "exceeded quota: gpus"})
    assert only(schedule(s, [refused])).cluster == "us"
    s = snapshot([cluster("eu")], [queue("q")])
    waiting = schedule(s, [refused]).waiting[refused.id]
    assert waiting.clusters["eu"] == "its admission refused the JobSet: exceeded quota: gpus"
