"""Fair-share preemption across tenants (opt-in per tenant, Kueue's LessThanOrEqualToFinalShare)."""

import pytest

from broker.engine.placement import Tenant, dry_run, schedule
from broker.engine.placement.fairness import fair_share_allows, tenant_fair_shares

from .fixtures import cluster, fabric, job, n_jobs, queue, running, snapshot


def full_federation(late: Tenant, early_weight: float = 1.0):
    """64 GPUs, all of them held by tenant early's eight 8-GPU jobs; tenant late holds nothing."""
    eu = cluster("eu", fabric(leaves=2, nodes_per_leaf=4))
    work = [running(f"early-{i}", "eu", [n.name], priority=10, started_at=float(i), queue_name="e", tenant="early")
            for i, n in enumerate(eu.nodes)]
    return snapshot([eu], [queue("e", tenant="early"), queue("l", tenant="late")], running=work,
                    tenants=[Tenant("early", early_weight), late])


def test_a_tenant_at_0_gpus_in_a_full_federation_reaches_its_fair_share_by_preemption_when_opted_in():
    s = full_federation(Tenant("late", 1.0, "LessThanOrEqualToFinalShare"))
    wanted = n_jobs("l", 8, gpus=8, tenant="late", priority=0)  # lower priority than the victims, too
    result = schedule(s, wanted)
    assert len(result.placements) == 4  # 32 of 64 GPUs: its fair share, and not a GPU beyond it
    assert sorted(p.job_id for p in result.preemptions) == ["early-4", "early-5", "early-6", "early-7"]
    assert {p.rule for p in result.preemptions} == {"FairSharing"}
    assert "below its fair share" in result.preemptions[0].message
    assert s.tenant_usage["early"]["nvidia.com/gpu"] == 32_000 == s.tenant_usage["late"]["nvidia.com/gpu"]


def test_and_not_when_it_did_not_opt_in():
    s = full_federation(Tenant("late", 1.0))
    result = schedule(s, n_jobs("l", 8, gpus=8, tenant="late"))
    assert not result.placements and not result.preemptions


@pytest.mark.parametrize("late_weight,placed", [(1.0, 4), (3.0, 6), (0.25, 1)])
def test_fair_share_preemption_stops_at_the_weighted_fair_share(late_weight, placed):
    s = full_federation(Tenant("late", late_weight, "LessThanOrEqualToFinalShare"))
    result = schedule(s, n_jobs("l", 8, gpus=8, tenant="late"))
    # late's fair share is w / (w + 1) of 64 GPUs, in 8-GPU jobs rounded down
    assert len(result.placements) == placed == len(result.preemptions)


def test_a_gang_is_taken_whole_or_not_at_all():
    # early runs two 32-GPU gangs; late wants 16 GPUs: only a whole gang can make room
    eu = cluster("eu", fabric(leaves=2, nodes_per_leaf=4))
    names = [n.name for n in eu.nodes]
    gangs = [running(f"gang-{g}", "eu", names[4 * g:4 * g + 4], started_at=float(g), queue_name="e", tenant="early")
             for g in range(2)]

    def preempted(early_weight):
        tenants = [Tenant("early", early_weight), Tenant("late", 1.0, "LessThanOrEqualToFinalShare")]
        s = snapshot([eu], [queue("e", tenant="early"), queue("l", tenant="late")], running=gangs, tenants=tenants)
        return [p.job_id for p in schedule(s, [job("l", gpus=8, pods=2, tenant="late")]).preemptions]

    assert preempted(1.0) == ["gang-1"]  # early keeps 32 GPUs, its fair share
    assert preempted(3.0) == []  # early's fair share is 48: losing a whole gang would leave it 32


def test_the_dry_run_lists_the_victims_it_would_take_and_why():
    s = full_federation(Tenant("late", 1.0, "LessThanOrEqualToFinalShare"))
    answer = dry_run(s, job("l", gpus=8, tenant="late"))
    [victim] = answer.preemptions
    assert (victim.job_id, victim.rule) == ("early-7", "FairSharing")
    assert s.tenant_usage["early"]["nvidia.com/gpu"] == 64_000  # nothing taken


def test_the_fair_share_rule():
    assert tenant_fair_shares({"a": 3.0}, ["a", "b"]) == {"a": 0.75, "b": 0.25}
    assert fair_share_allows(0.25, 0.5, 0.75, 0.5)
    assert fair_share_allows(0.5, 0.5, 0.5, 0.5)  # both end exactly at their fair shares
    assert not fair_share_allows(0.625, 0.5, 0.375, 0.5)  # the preemptor would end above its share
    assert not fair_share_allows(0.25, 0.5, 0.45, 0.5)  # the victim would end below its own


def test_age_does_not_undo_fairness_a_starving_job_of_a_tenant_above_its_share_waits_its_turn():
    # over weighs 48 of 64 GPUs (fair share 32) and has waited long; under holds 8 and has just come: the one
    # free node goes to under, and over's old job neither goes first nor holds nodes
    eu = cluster("eu", fabric(leaves=2, nodes_per_leaf=4))
    names = [n.name for n in eu.nodes]
    work = [running(f"over-{i}", "eu", [names[i]], queue_name="o", tenant="over") for i in range(6)] + \
        [running("under-0", "eu", [names[6]], queue_name="u", tenant="under")]
    s = snapshot([eu], [queue("o", tenant="over"), queue("u", tenant="under")], running=work, now=10_000.0)
    old, new = job("o", gpus=8, tenant="over", submitted_at=0.0), job("u", gpus=8, tenant="under", submitted_at=9_999.0)
    result = schedule(s, [old, new])
    assert [p.job_id for p in result.placements] == [new.id] and not result.holds


def test_a_tenant_that_would_end_above_its_share_takes_nothing_however_far_above_theirs_the_others_are():
    """Three active tenants (fair share 64/3 GPUs each): late holds 16 and asks 8 more (24 > 21.3); early
    holds 48, and would keep 40 after one eviction. Late's own work counts: it takes nothing."""
    eu = cluster("eu", fabric(leaves=2, nodes_per_leaf=4))
    names = [n.name for n in eu.nodes]
    work = ([running(f"early-{i}", "eu", [names[i]], queue_name="e", tenant="early") for i in range(6)]
            + [running(f"late-{i}", "eu", [names[i]], queue_name="l", tenant="late") for i in (6, 7)])
    s = snapshot([eu], [queue("e", tenant="early"), queue("l", tenant="late"), queue("o", tenant="other")],
                 running=work, tenants=[Tenant("late", 1.0, "LessThanOrEqualToFinalShare")])
    result = schedule(s, [job("l", gpus=8, tenant="late"), job("o", gpus=8, tenant="other")])
    assert not result.placements and not result.preemptions


def test_a_dry_run_of_a_split_job_that_gets_room_by_preemption_answers_and_changes_nothing():
    """A preemption applies a split job whole and answers it part by part; the dry run takes those parts back."""
    s = full_federation(Tenant("late", 1.0, "LessThanOrEqualToFinalShare"))
    split = job("l", parts=(("a", 1, 1, 8), ("b", 1, 1, 8)), tenant="late",
                annotations={"archipelago.io/placement": "split"})
    answer = dry_run(s, split)
    assert answer.placements and {p.rule for p in answer.preemptions} == {"FairSharing"}
    assert s.tenant_usage["early"]["nvidia.com/gpu"] == 64_000 and not any(s.tenant_usage["late"].values())
