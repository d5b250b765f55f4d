"""EASY backfill on held nodes (issue #46): a starving job's hold is a reservation from when the work on its nodes is
expected to end; a job expected to end before that may use the held nodes, one that would cross it may not, and the
starving job starts no later for it."""

from __future__ import annotations

from dataclasses import replace

from broker.engine.forecast import Limits, forecast
from broker.engine.placement import Config, schedule

from tests.placement.fixtures import cluster, fabric, job, queue, running, snapshot

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
