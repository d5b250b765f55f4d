"""EASY backfill on held nodes (issue #46): a starving job's hold is a reservation from when the work on its nodes is
expected to end; a job expected to end before that may use the held nodes, one that would cross it may not, and the
starving job starts no later for it."""

from __future__ import annotations

from dataclasses import replace

from broker.engine.forecast import Limits, forecast
from broker.engine.placement import Config, schedule

from tests.placement.fixtures import GPU, cluster, fabric, hard, job, queue, running, snapshot

NOW = 10_000.0
EXACT = Limits(resolution_s=1.0, relative_resolution=0.0)


def fleet(runtime_of_r1: float | None = 1000.0):
    """One leaf of four 8-GPU nodes; r1 runs on the first until NOW + 1000 (if it says). A job of four nodes has
    waited since 0 (past starvation_after): it holds the leaf."""
    eu = cluster("eu", fabric(leaves=1, nodes_per_leaf=4))
    r1 = replace(running("r1", "eu", [eu.nodes[0].name]),
                 expected_end=None if runtime_of_r1 is None else NOW + runtime_of_r1)
    starving = job("big", gpus=8, pods=4, submitted_at=0.0)
    return eu, [r1], starving


def test_a_short_job_runs_on_held_nodes_and_one_that_would_cross_the_reservation_does_not():
    eu, work, starving = fleet()
    short = replace(job("small", gpus=8, submitted_at=NOW), runtime=600.0)
    long = replace(job("small", gpus=8, submitted_at=NOW + 1), runtime=2000.0)
    result = schedule(snapshot([eu], [queue("big"), queue("small")], running=work, now=NOW), [starving, short, long])
    hold = result.holds[starving.id]
    assert hold.start == NOW + 1000  # when r1 is expected to end: the held job's start
    assert [p.job_id for p in result.placements] == [short.id]
    assert result.placements[0].node_names()[0] in hold.nodes  # on a held node
    from broker.engine.placement.explain import moment
    assert result.waiting[long.id].clusters["eu"].endswith(
        f"held for a job that has waited too long from about {moment(NOW + 1000)} (a job whose "
        f"archipelago.io/expected-runtime ends by then may use them)")


def test_no_backfill_without_a_runtime_nor_where_the_reservation_has_no_start():
    eu, work, starving = fleet()
    undeclared = job("small", gpus=8, submitted_at=NOW)
    result = schedule(snapshot([eu], [queue("big"), queue("small")], running=work, now=NOW), [starving, undeclared])
    assert not result.placements
    eu, work, starving = fleet(runtime_of_r1=None)  # r1 says nothing of its end: the reservation has no start
    short = replace(job("small", gpus=8, submitted_at=NOW), runtime=60.0)
    result = schedule(snapshot([eu], [queue("big"), queue("small")], running=work, now=NOW), [starving, short])
    assert result.holds[starving.id].start is None and not result.placements


def test_the_starving_job_starts_no_later_with_backfill():
    """The forecast, with the short job declared (it backfills) and undeclared (it waits): the big job starts at
    NOW + 1000 either way; the short one at NOW with backfill, after the big one without."""
    eu, work, starving = fleet()
    short = job("small", gpus=8, submitted_at=NOW)
    runtimes = {starving.id: 5000.0, short.id: 600.0}
    ends = {"r1": NOW + 1000}
    declared = forecast(snapshot([eu], [queue("big"), queue("small")], running=work, now=NOW),
                        [starving, replace(short, runtime=600.0)], work, ends, runtimes, Config(), EXACT)
    undeclared = forecast(snapshot([eu], [queue("big"), queue("small")], running=work, now=NOW),
                          [starving, short], work, ends, runtimes, Config(), EXACT)
    assert declared[starving.id].start == undeclared[starving.id].start == NOW + 1000
    assert declared[short.id].start == NOW and undeclared[short.id].start == NOW + 6000


def two_leaves():
    """leaf-0 runs one node's work to NOW + 5000; leaf-1 two nodes' work to NOW + 1000. A gang of four 8-GPU pods
    within one leaf has waited past starvation_after: leaf-0 has the least work, leaf-1 frees first."""
    eu = cluster("eu", fabric(leaves=2, nodes_per_leaf=4))
    work = [replace(running("late", "eu", [eu.nodes[0].name]), expected_end=NOW + 5000),
            replace(running("soon", "eu", [eu.nodes[4].name, eu.nodes[5].name]), expected_end=NOW + 1000)]
    return eu, work, job("big", gpus=8, pods=4, annotations=hard(1), submitted_at=0.0)


def test_the_hold_is_where_the_job_can_start_soonest_not_where_least_work_runs():
    eu, work, starving = two_leaves()
    result = schedule(snapshot([eu], [queue("big")], running=work, now=NOW), [starving])
    hold = result.holds[starving.id]
    assert (hold.hypernode, hold.start) == ("leaf-1", NOW + 1000)
    undeclared = [replace(r, expected_end=None) for r in work]  # no end known: the least work, as before
    result = schedule(snapshot([eu], [queue("big")], running=undeclared, now=NOW), [starving])
    assert result.holds[starving.id].hypernode == "leaf-0"


def test_the_hold_stays_where_it_was_after_a_job_backfilled_there():
    """A short job backfills the hold's free nodes (this cycle, then running the next): leaf-1 has more work than
    leaf-0 then, but still frees first, and the reservation does not move to leaf-0 to start at NOW + 5000."""
    eu, work, starving = two_leaves()
    short = replace(job("small", gpus=8, pods=2, annotations=hard(1), submitted_at=NOW), runtime=600.0)
    first = schedule(snapshot([eu], [queue("big"), queue("small")], running=work, now=NOW), [starving, short])
    assert first.holds[starving.id].hypernode == "leaf-1"
    [placed] = first.placements
    assert set(placed.node_names()) <= set(first.holds[starving.id].nodes)
    work = work + [placed.as_running(tenant="t", queue="small", priority=0, started_at=NOW, expected_end=NOW + 600)]
    second = schedule(snapshot([eu], [queue("big"), queue("small")], running=work, now=NOW + 10), [starving])
    assert (second.holds[starving.id].hypernode, second.holds[starving.id].start) == ("leaf-1", NOW + 1000)


def test_a_job_placed_earlier_in_the_cycle_counts_its_end_for_the_next_hold():
    """Two starving gangs: the older starts on the empty leaf-0 for 300 s; the next one's hold is there (free at
    NOW + 300), not on leaf-1 (free at NOW + 1000), though the first job is not in the snapshot's running work yet."""
    eu = cluster("eu", fabric(leaves=2, nodes_per_leaf=4))
    work = [replace(running("soon", "eu", [eu.nodes[4].name, eu.nodes[5].name]), expected_end=NOW + 1000)]
    older = replace(job("a", gpus=8, pods=4, annotations=hard(1), submitted_at=0.0), runtime=300.0)
    newer = job("b", gpus=8, pods=4, annotations=hard(1), submitted_at=1.0)
    result = schedule(snapshot([eu], [queue("a"), queue("b")], running=work, now=NOW), [older, newer])
    assert [p.job_id for p in result.placements] == [older.id]
    assert (result.holds[newer.id].hypernode, result.holds[newer.id].start) == ("leaf-0", NOW + 300)


def test_a_daemon_sets_pods_on_the_held_nodes_leave_the_reservation_its_start_unless_the_job_cannot_fit_beside():
    """Pods the broker did not place are taken to stay: a daemon set's small pod on every node leaves room for the
    job, so the reservation keeps its start and backfill goes on; half of every node's GPUs taken does not."""
    eu, work, starving = fleet()
    short = replace(job("small", gpus=8, submitted_at=NOW), runtime=600.0)
    with_daemons = replace(eu, nodes=tuple(replace(n, used={"cpu": 100, "pods": 1000}) for n in eu.nodes))
    result = schedule(snapshot([with_daemons], [queue("big"), queue("small")], running=work, now=NOW),
                      [starving, short])
    assert result.holds[starving.id].start == NOW + 1000 and [p.job_id for p in result.placements] == [short.id]
    half_taken = replace(eu, nodes=tuple(replace(n, used={GPU: 4000}) for n in eu.nodes))
    result = schedule(snapshot([half_taken], [queue("big"), queue("small")], running=work, now=NOW), [starving, short])
    assert result.holds[starving.id].start is None
