"""Quotas and fair share over random tenants, weights, quotas, policies and jobs (hypothesis)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.engine.placement import Tenant, schedule
from broker.engine.placement.fairness import dominant_share, tenant_fair_shares

from .fixtures import GPU, cluster, fabric, job, queue, snapshot

PROPERTY = settings(max_examples=60, deadline=None)


@st.composite
def federations(draw):
    """Tenants with weights and opt-ins, each with one or two queues of random quotas and policies."""
    tenants, queues = [], []
    for t in range(draw(st.integers(2, 3))):
        name = f"t{t}"
        tenants.append(Tenant(name, draw(st.sampled_from([1.0, 2.0, 3.0])),
                              draw(st.sampled_from(["Never", "LessThanOrEqualToFinalShare"]))))
        for k in range(draw(st.integers(1, 2))):
            queues.append(queue(f"{name}-q{k}", tenant=name, quota=draw(st.sampled_from([None, 8, 16, 32])),
                                borrow=draw(st.sampled_from([None, 0, 8])),
                                preemption=draw(st.sampled_from(["Never", "LowerPriority"])),
                                reclaim=draw(st.sampled_from(["Never", "LowerPriority", "Any"]))))
    clusters = [cluster(f"c{c}", fabric(f"c{c}-", leaves=2, nodes_per_leaf=2)) for c in range(draw(st.integers(1, 2)))]
    return tenants, queues, clusters


def batches(draw, queues, n, prefix):
    return [job((q := draw(st.sampled_from(queues))).name, tenant=q.tenant, job_id=f"{prefix}{i}",
                gpus=draw(st.sampled_from([1, 2, 4, 8])), pods=draw(st.integers(1, 4)),
                priority=draw(st.integers(0, 3)), submitted_at=float(i)) for i in range(n)]


def check_quotas(s, queues):
    """No queue above nominal + borrowing limit; no tenant above its cohort's nominal total when every one of
    its queues has a GPU quota (it may borrow only from its own queues)."""
    for q in queues:
        used = s.queues[q.name].usage.get(GPU, 0)
        if GPU in q.nominal_quota and q.borrowing_limit is not None:
            assert used <= q.nominal_quota[GPU] + q.borrowing_limit[GPU], q.name
    for tenant, states in s.cohorts.items():
        if all(GPU in st_.queue.nominal_quota for st_ in states):
            assert s.tenant_usage[tenant].get(GPU, 0) <= sum(st_.queue.nominal_quota[GPU] for st_ in states), tenant


@PROPERTY
@given(federations(), st.data())
def test_quotas_hold_and_fair_share_preemption_never_pushes_a_tenant_below_its_share(federation, data):
    tenants, queues, clusters = federation
    first = batches(data.draw, queues, data.draw(st.integers(1, 12)), "a")
    s = snapshot(clusters, queues, tenants=tenants)
    placed = schedule(s, first).placements
    check_quotas(s, queues)

    owner = {j.id: j for j in first}
    running = [p.as_running(tenant=owner[p.job_id].tenant, queue=owner[p.job_id].queue,
                            priority=owner[p.job_id].priority, started_at=float(i)) for i, p in enumerate(placed)]
    second = batches(data.draw, queues, data.draw(st.integers(1, 12)), "b")
    s = snapshot(clusters, queues, running=running, tenants=tenants)
    active = {t for t, usage in s.tenant_usage.items() if any(usage.values())} | {j.tenant for j in second}
    fair = tenant_fair_shares({t.name: t.weight for t in tenants}, active)
    result = schedule(s, second)
    check_quotas(s, queues)

    preemptor_tenant = {j.id: j.tenant for j in second}
    victim_tenant = {r.job_id: r.tenant for r in running}
    took_from_itself = {preemptor_tenant[p.preemptor] for p in result.preemptions
                        if victim_tenant[p.job_id] == preemptor_tenant[p.preemptor]}
    for p in result.preemptions:
        victim, preemptor = victim_tenant[p.job_id], preemptor_tenant[p.preemptor]
        assert (p.rule == "FairSharing") == (victim != preemptor)
        if p.rule == "FairSharing":
            assert next(t for t in tenants if t.name == preemptor).fair_share_preemption != "Never"
            if victim not in took_from_itself:  # its own preemptions are its own to make
                assert dominant_share(s.tenant_usage[victim], s.totals) >= fair[victim] - 1e-9
