"""The forecast loop end to end over the database (SQLite and PostgreSQL): what it reads of running and waiting
jobs, what it stores with each waiting job, and the words the API gives it."""

from __future__ import annotations

from datetime import timedelta

from api.views import jobs_out
from broker.services.forecast import ForecastService
from broker.store.db.models import Job, Placement
from clusters.rules.times import rfc3339
from tests.scheduler.conftest import add_cluster, add_queue, submit


def leaf_taken(setup, scheduler, *waiting: str):
    """One leaf of four nodes; job first (declared 2 h) takes them all; the `waiting` jobs, the same gang, wait."""
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
        queue = add_queue(session)
        first = submit(session, queue, "first", pods=4)
        first.declared_runtime = 7200.0
    scheduler.run_once()
    with setup() as session:
        jobs = [submit(session, session.get(type(queue), queue.id), name, pods=4) for name in waiting]
    scheduler.run_once()
    return queue, first, jobs


def test_a_waiting_gang_starts_when_the_work_on_its_nodes_is_expected_to_end(db, setup, scheduler, settings):
    """One leaf of four nodes; job first (declared 2 h) takes them all; second, the same gang, waits for it: its
    expected start is first's start plus 2 h, on that leaf, after first; its own runtime is the broker's default."""
    _, first, [second] = leaf_taken(setup, scheduler, "second")
    outcome = ForecastService(db, settings).run_once()
    assert outcome.forecast == 1
    with db.sessions() as session:
        [placement] = session.query(Placement).filter(Placement.job_id == first.id).all()
        forecast = session.get(Job, second.id).forecast
        started = placement.started_at or placement.created_at
        assert forecast["start"] == rfc3339(started + timedelta(hours=2))
        assert (forecast["cluster"], forecast["hypernode"], forecast["after"]) == ("eu-west", "leaf-0", [str(first.id)])
        assert (forecast["runtime"], forecast["runtime_source"]) == (settings.forecast_default_runtime, "default")
        [summary] = jobs_out(session, [session.get(Job, second.id)])
    assert summary.expected == f"after job {first.id} ends, on eu-west, HyperNode leaf-0"
    assert rfc3339(summary.expected_start) == forecast["start"]


def test_a_job_no_longer_waiting_loses_its_forecast_and_one_no_cluster_takes_never_starts(db, setup, scheduler,
                                                                                          settings):
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
        queue = add_queue(session)
        too_big = submit(session, queue, "too-big", gpus=16)
    forecasts = ForecastService(db, settings)
    forecasts.run_once()
    with db.sessions() as session:
        assert session.get(Job, too_big.id).forecast["never"] is True
        [summary] = jobs_out(session, [session.get(Job, too_big.id)])
    assert summary.expected.startswith("never, as the fleet is now") and summary.expected_start is None
    with setup() as session:
        session.get(Job, too_big.id).state = "Cancelled"
    assert forecasts.run_once().forecast == 0
    with db.sessions() as session:
        [summary] = jobs_out(session, [session.get(Job, too_big.id)])
    assert summary.expected is None  # a job that no longer waits shows no forecast


def test_the_words_name_a_few_jobs_of_its_own_and_never_another_tenants():
    from api.views import expected_words

    forecast = {"start": "2026-12-07T14:20:00Z", "cluster": "eu", "hypernode": "leaf-1", "after": ["1", "2"]}
    assert expected_words(forecast, 7, {1: 7, 2: 8}) == "after job 1 and a job of another tenant end, on eu, HyperNode leaf-1"
    many = {**forecast, "after": [str(i) for i in range(1, 8)]}
    assert expected_words(many, 7, {i: 7 for i in range(1, 6)} | {6: 8, 7: 8}) == \
        "after job 1, job 2, job 3 and 4 more jobs end, on eu, HyperNode leaf-1"
    assert expected_words({**forecast, "after": []}, 7, {}) == "at the next cycle, on eu, HyperNode leaf-1"


def test_a_queue_says_the_next_expected_start_of_its_waiting_jobs(db, setup, scheduler, settings):
    from broker.store.tenancy import queue_stats

    queue, _, _ = leaf_taken(setup, scheduler, "second", "third")
    ForecastService(db, settings).run_once()
    with db.sessions() as session:
        starts = [j.forecast["start"] for j in session.query(Job).filter(Job.state == "Queued")]
        assert len(set(starts)) == 2  # one after the other
        assert queue_stats(session, [queue.id])[queue.id].next_expected_start == min(starts)
