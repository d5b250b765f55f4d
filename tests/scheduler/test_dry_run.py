"""Dry run: where a JobSet would go now and why, over the same snapshot, writing nothing."""

from __future__ import annotations

import pytest

from broker.engine.jobset import JobSetError
from broker.store.db.models import Event, Job, Placement
from broker.store.scheduling import dry_run_manifest
from tests.placement.fixtures import manifest
from tests.scheduler.conftest import add_cluster, add_queue, count, submit


def _rows(db) -> tuple[int, int, int]:
    with db.sessions() as session:
        return count(session, Job), count(session, Placement), count(session, Event)


def test_a_dry_run_answers_where_and_why_and_writes_nothing(db, setup, settings):
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
        add_cluster(session, "us-east", state="Cordoned")
        queue = add_queue(session)
        submit(session, queue, "running", gpus=8, pods=4, state="Running")
    before = _rows(db)
    with db.sessions() as session:
        answer = dry_run_manifest(session, manifest("probe", (("workers", 1, 2, 8),)), "research", settings)
    assert [(p.cluster, p.hypernode) for p in answer.placements] == [("eu-west", "leaf-0")]
    assert {v.cluster: v.reason for v in answer.clusters}["us-east"] == "cordoned"
    assert answer.waiting is None
    assert _rows(db) == before


def test_a_dry_run_sees_the_capacity_live_placements_hold(db, setup, scheduler, settings):
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
        submit(session, add_queue(session), "holder", gpus=8, pods=4)
    scheduler.run_once()
    with db.sessions() as session:
        answer = dry_run_manifest(session, manifest("probe", (("workers", 1, 1, 8),)), "research", settings)
    assert answer.placements == ()
    assert answer.waiting.clusters == {"eu-west": "needs 8 GPUs; 0 GPUs free"}


def test_a_dry_run_refuses_another_tenants_queue(db, setup, settings):
    with setup() as session:
        add_cluster(session, "eu-west")
        add_queue(session, "theirs", tenant="other")
    with db.sessions() as session, pytest.raises(JobSetError, match="does not exist for this tenant"):
        dry_run_manifest(session, manifest("probe", queue_name="theirs"), "research", settings)


def test_a_dry_run_without_a_queue_label_uses_the_tenants_default_queue(db, setup, settings):
    with setup() as session:
        add_cluster(session, "eu-west")
        add_queue(session, "other", quota_gpus=0)  # a job placed through it would wait for quota
        add_queue(session, "default").is_default = True
    body = manifest("probe")
    del body["metadata"]["labels"]
    with db.sessions() as session:
        answer = dry_run_manifest(session, body, "research", settings)
    assert answer.placements and answer.waiting is None


def test_a_dry_run_lists_the_victims_it_would_take_and_why(db, setup, scheduler, settings):
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
        low = submit(session, add_queue(session, preemption="LowerPriority"), "low", gpus=8, pods=4, priority=10)
    scheduler.run_once()
    before = _rows(db)
    urgent = manifest("urgent", (("workers", 1, 4, 8),))
    urgent["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "high"
    with db.sessions() as session:
        answer = dry_run_manifest(session, urgent, "research", settings)
    [victim] = answer.preemptions
    assert (victim.job_id, victim.rule) == (str(low.id), "WithinQueue")
    assert "preempted by higher-priority job" in victim.message
    assert _rows(db) == before
