"""With runtimes known exactly and no job arriving later, the forecast is a replay: each waiting job's expected start
is when the engine, moved from end to end as the scheduler would be, starts it (the property that keeps the play
forward the scheduler's own, and no second model of it)."""

from __future__ import annotations

import heapq
import random
from dataclasses import replace

import pytest

from broker.engine.forecast import Limits, forecast
from broker.engine.placement import Snapshot, schedule, shape_of

from tests.placement.fixtures import cluster, fabric, hard, job, queue, running

EXACT = Limits(resolution_s=0.0, relative_resolution=0.0, steps=10_000)
NOW = 100_000.0
TENANT = {"a": "t1", "b": "t2"}


def workload(rnd: random.Random):
    clusters = [cluster(f"c{i}", fabric(f"c{i}-", leaves=2, nodes_per_leaf=4)) for i in range(2)]
    queues = [queue("a", tenant="t1", weight=2.0), queue("b", tenant="t2")]
    work, ends = [], {}
    for c in clusters:
        for i, node in enumerate(c.nodes[::3]):  # a third of the nodes busy
            q = rnd.choice("ab")
            work.append(running(f"r-{node.name}", c.name, [node.name], queue_name=q, tenant=TENANT[q]))
            ends[f"r-{node.name}"] = NOW + rnd.randrange(60, 7200, 60)
    pending = []
    for i in range(rnd.randrange(4, 40)):
        q = rnd.choice("ab")
        p = job(q, tenant=TENANT[q], gpus=rnd.choice([4, 8]), pods=rnd.choice([1, 2, 4, 8]),
                annotations=hard(1) if rnd.random() < 0.3 else None, submitted_at=NOW - rnd.randrange(0, 600),
                job_id=f"j{i}")
        pending.append(replace(p, shape=shape_of(p.spec)))
    runtimes = {p.id: float(rnd.randrange(60, 7200, 60)) for p in pending}
    if rnd.random() < 0.5:  # they declare them: those that end before a hold's start backfill on its nodes
        work = [replace(r, expected_end=ends[r.job_id]) for r in work]
        pending = [replace(p, runtime=runtimes[p.id]) for p in pending]
    return clusters, queues, work, ends, pending, runtimes


def replayed(clusters, queues, work, ends, pending, runtimes) -> dict[str, float]:
    """Start times as the engine gives them, moved from end to end."""
    live = {r.job_id: [r] for r in work}
    events = [(end, job_id) for job_id, end in ends.items()]
    heapq.heapify(events)
    waiting, starts, now = list(pending), {}, NOW
    while waiting:
        snapshot = Snapshot(clusters, queues, (), [p for parts in live.values() for p in parts], now)
        result = schedule(snapshot, waiting)
        for placement in result.placements:
            j = next(j for j in waiting if j.id == placement.job_id)
            live.setdefault(j.id, []).append(placement.as_running(
                tenant=j.tenant, queue=j.queue, priority=j.priority, started_at=now,
                expected_end=None if j.runtime is None else now + runtimes[j.id]))
        for job_id in {p.job_id for p in result.placements}:
            starts[job_id] = now
            heapq.heappush(events, (now + runtimes[job_id], job_id))
        waiting = [j for j in waiting if j.id not in starts]
        if not events or not waiting:
            break
        now = events[0][0]
        while events and events[0][0] <= now:
            live.pop(heapq.heappop(events)[1], None)
    return starts


@pytest.mark.parametrize("seed", range(40))
def test_with_exact_runtimes_the_forecast_is_the_replay(seed):
    clusters, queues, work, ends, pending, runtimes = workload(random.Random(seed))
    assert any(r.expected_end for r in work) == any(p.runtime for p in pending)
    expected = forecast(Snapshot(clusters, queues, (), work, NOW), pending, work, ends, runtimes, limits=EXACT)
    assert {j: e.start for j, e in expected.items() if e.start is not None} == \
        replayed(clusters, queues, work, ends, pending, runtimes)
