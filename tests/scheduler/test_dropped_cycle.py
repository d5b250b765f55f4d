"""A cycle whose decisions are dropped (another scheduler committed between its read and its commit) is counted as
dropped, and does not report `placements_last_cycle=0` as if it had run."""

from __future__ import annotations

from broker.process.metrics import REGISTRY
from broker.services.scheduler import SchedulerService
from tests.scheduler.conftest import add_cluster, add_queue, submit

LAST_CYCLE, DROPPED = "archipelago_scheduler_placements_last_cycle", "archipelago_scheduler_cycles_dropped_total"


def test_a_dropped_cycle_is_counted_and_keeps_the_last_cycles_placements(db, setup, settings):
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1, nodes_per_leaf=1)
        queue = add_queue(session)
        submit(session, queue, "first", gpus=8)
        submit(session, queue, "second", gpus=8)
    other, late = SchedulerService(db, settings), SchedulerService(db, settings)
    read = late.read

    def overtaken():  # after the late cycle's read, before its commit: the other commits first
        inventory = read()
        assert other.run_once().placements == 1
        return inventory

    late.read = overtaken
    dropped = REGISTRY.get_sample_value(DROPPED)
    late = late.run_once()
    assert late.stale
    assert REGISTRY.get_sample_value(DROPPED) == dropped + 1
    assert REGISTRY.get_sample_value(LAST_CYCLE) == 1  # the other's cycle, the last that ran
