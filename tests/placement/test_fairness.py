"""Fair share across queues and tenants, quotas before borrowing."""

import pytest

from broker.engine.placement import Tenant, schedule
from broker.engine.placement.fairness import (check_quota, dominant_share, fair_share_allows, fair_shares, lent,
                                              weighted_share)

from .fixtures import GPU, cluster, fabric, gpus_by_queue, job, n_jobs, queue, running, snapshot

ONE_CLUSTER_64_GPUS = [cluster("eu", fabric(leaves=2, nodes_per_leaf=4))]


def shares(queues, jobs, tenants=()):
    result = schedule(snapshot(ONE_CLUSTER_64_GPUS, queues, tenants=tenants), jobs)
    used = gpus_by_queue(result.placements, jobs)
    total = sum(used.values())
    assert total == 64, "the cluster is saturated"
    return {q: used.get(q, 0) / total for q in sorted({j.queue for j in jobs})}


@pytest.mark.parametrize("weights,expected", [((1, 1), 0.5), ((3, 1), 0.75)], ids=["equal", "3:1"])
def test_saturating_queues_share_by_weight(weights, expected):
    jobs = n_jobs("a", 64, gpus=1) + n_jobs("b", 64, gpus=1)
    got = shares([queue("a", weight=weights[0]), queue("b", weight=weights[1])], jobs)
    assert abs(got["a"] - expected) <= 0.05 and abs(got["b"] - (1 - expected)) <= 0.05


def test_weights_hold_across_tenants_too():
    jobs = n_jobs("a", 64, gpus=1, tenant="x") + n_jobs("b", 64, gpus=1, tenant="y")
    got = shares([queue("a", tenant="x"), queue("b", tenant="y")], jobs, tenants=[Tenant("x", 3), Tenant("y", 1)])
    assert abs(got["a"] - 0.75) <= 0.05


def gpus_by_tenant(jobs, tenants=(), queues=None):
    queues = queues or sorted({(j.queue, j.tenant) for j in jobs})
    result = schedule(snapshot(ONE_CLUSTER_64_GPUS, [queue(q, tenant=t) for q, t in queues], tenants=tenants), jobs)
    tenant_of = {j.id: j.tenant for j in jobs}
    used: dict[str, int] = {}
    for p in result.placements:
        used[tenant_of[p.job_id]] = used.get(tenant_of[p.job_id], 0) + sum(
            u.get(GPU, 0) for u in p.node_usage.values()) // 1000
    return used


def test_three_queues_vs_one_at_equal_tenant_weights_share_32_32_of_64():
    # Tenant x opens three queues, tenant y one; each tenant's weight is 1, so each gets half the federation.
    jobs = [j for q in ("x1", "x2", "x3") for j in n_jobs(q, 64, gpus=1, tenant="x")] + \
        n_jobs("y1", 64, gpus=1, tenant="y")
    assert gpus_by_tenant(jobs) == {"x": 32, "y": 32}


def test_adding_a_queue_never_changes_another_tenants_share():
    y_jobs = n_jobs("y1", 64, gpus=1, tenant="y")
    one = gpus_by_tenant(n_jobs("x1", 64, gpus=1, tenant="x") + y_jobs, tenants=[Tenant("x", 1), Tenant("y", 3)])
    four = gpus_by_tenant([j for q in ("x1", "x2", "x3", "x4") for j in n_jobs(q, 64, gpus=1, tenant="x")]
                          + y_jobs, tenants=[Tenant("x", 1), Tenant("y", 3)])
    assert one["y"] == four["y"] == 48


def test_a_tenants_queues_share_its_part_by_queue_weight():
    jobs = n_jobs("a", 64, gpus=1, tenant="x") + n_jobs("b", 64, gpus=1, tenant="x") + \
        n_jobs("c", 64, gpus=1, tenant="y")
    result = schedule(snapshot(ONE_CLUSTER_64_GPUS, [queue("a", tenant="x", weight=3), queue("b", tenant="x"),
                                                     queue("c", tenant="y")]), jobs)
    assert gpus_by_queue(result.placements, jobs) == {"a": 24, "b": 8, "c": 32}


def test_fair_shares_are_tenant_weight_then_queue_weight_among_the_active():
    queues = {"a": ("x", 3.0), "b": ("x", 1.0), "c": ("y", 1.0), "idle": ("z", 5.0)}
    shares = fair_shares({"x": 1.0, "y": 3.0, "z": 2.0}, queues, active=["a", "b", "c"])
    assert shares == {"a": 0.1875, "b": 0.0625, "c": 0.75, "idle": 0.0}


def test_fair_share_is_by_dominant_resource_not_gpus_alone():
    # queue b's jobs need no GPU but a whole node's cpu: its dominant resource is cpu
    cpu_heavy = n_jobs("b", 16, gpus=0, cpu=64)
    gpu_light = n_jobs("a", 64, gpus=1)
    result = schedule(snapshot(ONE_CLUSTER_64_GPUS, [queue("a"), queue("b")]), gpu_light + cpu_heavy)
    placed = {j.queue: 0 for j in gpu_light + cpu_heavy}
    for p in result.placements:
        placed[p.job_id.split("-")[0]] += 1
    # each of b's jobs takes 1/8 of the cpu, each of a's 1/64 of the GPUs; equal shares → a ≈ 8 × b
    assert placed["b"] >= 3 and placed["a"] >= 8 * placed["b"] - 8


def test_a_tenant_under_its_quota_is_served_before_one_borrowing():
    # x uses 24 of its 40 nominal GPUs (share 24/64); y uses all 16 nominal (share 16/64) and must borrow.
    # By share alone y would go first; quota first, x does.
    x, y = queue("x", tenant="tx", quota=40), queue("y", tenant="ty", quota=16)
    lender = queue("y-idle", tenant="ty", quota=48)
    eu = cluster("eu", fabric(leaves=2, nodes_per_leaf=4))
    names = [n.name for n in eu.nodes]
    busy = [running("x-old", "eu", names[:3], queue_name="x", tenant="tx"),
            running("y-old", "eu", names[3:5], queue_name="y", tenant="ty")]
    s = snapshot([eu], [x, y, lender], running=busy)
    only_room_for_one = job("x", pods=1, gpus=8, tenant="tx", submitted_at=5.0), \
        job("y", pods=1, gpus=8, tenant="ty", submitted_at=1.0)
    s.clusters["eu"].apply({i: {GPU: 8000} for i in range(5, 7)}, {}, [], +1)  # leave one free node
    result = schedule(s, list(only_room_for_one))
    assert [p.job_id for p in result.placements] == [only_room_for_one[0].id]


def test_dominant_share_and_weight():
    totals = {GPU: 64_000, "cpu": 512_000}
    assert dominant_share({GPU: 16_000, "cpu": 256_000}, totals) == 0.5
    assert weighted_share({GPU: 16_000}, {GPU: 16_000}, 2.0, totals) == 0.25


def test_quota_verdicts():
    q = queue("q", tenant="t", quota=16, borrow=8)
    sibling = queue("s", tenant="t", quota=32)
    cohort = [(q, {GPU: 16_000}), (sibling, {})]
    assert check_quota(q, {GPU: 8_000}, {GPU: 8_000}, cohort).borrowing is False
    assert check_quota(q, {GPU: 16_000}, {GPU: 8_000}, cohort).borrowing is True
    refused = check_quota(q, {GPU: 16_000}, {GPU: 16_000}, cohort)
    assert not refused.admissible and "may borrow at most 8 GPUs" in refused.message
    busy_sibling = [(q, {GPU: 16_000}), (sibling, {GPU: 30_000})]
    short = check_quota(q, {GPU: 16_000}, {GPU: 4_000}, busy_sibling)
    assert short.message == ("queue q is at its quota of 16 GPUs; tenant t's other queues have 2 GPUs to lend "
                             "and it needs 4 GPUs more")


def test_what_each_queue_lends_is_the_others_borrowing_in_proportion_to_its_unused_quota():
    cohort = {"busy": ({GPU: 16_000}, {GPU: 28_000}), "idle": ({GPU: 16_000}, {}),
              "half": ({GPU: 8_000}, {GPU: 4_000}), "free": ({}, {GPU: 8_000})}
    assert lent(cohort) == {"busy": {}, "idle": {GPU: 9_600}, "half": {GPU: 2_400}, "free": {}}
    assert lent({"a": ({GPU: 8_000}, {GPU: 8_000})}) == {"a": {}}


@pytest.mark.parametrize("usage, demand, weight, share", [
    ({}, {GPU: 8000}, 1.0, 0.125),  # nothing used yet: the demand alone
    ({"cpu": 32_000}, {GPU: 8000}, 1.0, 0.5),  # the dominant resource is one the job does not ask for
    ({GPU: 8000}, {"cpu": 16_000}, 1.0, 0.25),
    ({GPU: 8000}, {GPU: 8000}, 0.5, 0.5),  # half the weight, twice the share
])
def test_a_weighted_share_is_the_dominant_share_after_admission_over_the_weight(usage, demand, weight, share):
    assert weighted_share(usage, demand, weight, {"cpu": 64_000, GPU: 64_000}) == share


def test_nothing_used_is_a_share_of_nothing():
    assert dominant_share({}, {GPU: 64_000}) == 0.0


def test_a_tenant_without_a_record_weighs_1_beside_one_that_has_one():
    shares = fair_shares({"x": 1.0}, {"a": ("x", 1.0), "b": ("y", 1.0)}, active=["a", "b"])
    assert shares == {"a": 0.5, "b": 0.5}
    assert snapshot([], [], tenants=[Tenant("x", 3.0)]).tenant_weight("y") == 1.0


def test_a_share_within_rounding_of_the_fair_share_counts_as_at_it():
    """Dominant shares are sums of float divisions: one rounding away from the fair share is at it, both ways."""
    assert fair_share_allows(0.5 + 1e-9, 0.5, 0.25 - 1e-9, 0.25)
    assert not fair_share_allows(0.5 + 1e-6, 0.5, 0.25, 0.25)
    assert not fair_share_allows(0.5, 0.5, 0.25 - 1e-6, 0.25)


def test_the_cohorts_borrowing_adds_up_over_every_borrower_and_is_lent_in_whole_milli_units():
    """Two queues borrow 1 GPU each; the lenders' unused quotas are 2 and 1 GPUs: they lend 2/3 and 1/3 of the
    2 GPUs, rounded down. A queue exactly at its quota neither borrows nor lends."""
    cohort = {"b1": ({GPU: 4_000}, {GPU: 5_000}), "b2": ({GPU: 4_000}, {GPU: 5_000}),
              "exact": ({GPU: 4_000}, {GPU: 4_000}), "l1": ({GPU: 2_000}, {}), "l2": ({GPU: 1_000}, {})}
    assert lent(cohort) == {"b1": {}, "b2": {}, "exact": {}, "l1": {GPU: 1_333}, "l2": {GPU: 666}}


def test_nobody_lends_what_nobody_has_unused():
    over_with_no_lender = {"over": ({GPU: 8_000}, {GPU: 12_000}), "exact": ({GPU: 8_000}, {GPU: 8_000})}
    assert lent(over_with_no_lender) == {"over": {}, "exact": {}}
    nobody_borrows = {"exact": ({GPU: 8_000}, {GPU: 8_000}), "idle": ({GPU: 8_000}, {})}
    assert lent(nobody_borrows) == {"exact": {}, "idle": {}}


def test_a_job_of_another_tenant_than_its_queues_is_refused_with_both_named():
    """Fairness reads a job's tenant off its queue (a tenant submits to its own queues): a job that says otherwise,
    or two jobs of one queue of two tenants, are refused, saying which."""
    federation = [queue("a", tenant="x")]
    with pytest.raises(ValueError, match="belongs to tenant y, the queue to x"):
        schedule(snapshot(ONE_CLUSTER_64_GPUS, federation), [job("a", tenant="y")])
    with pytest.raises(ValueError, match="belong to tenants x and y: a queue holds one tenant's jobs"):
        schedule(snapshot(ONE_CLUSTER_64_GPUS, federation), [job("a", tenant="x"), job("a", tenant="y")])
