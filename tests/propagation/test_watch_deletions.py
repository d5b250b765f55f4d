"""A copy deleted on its member by someone else, as a status watch reports it (a DELETED event, broker/store/outbox/
`record_status(deleted=True)`): the stepped federation lists instead of watching, so its tests see such a deletion
through the list (`record_list`); here the event is handed to the status loop as its watch would."""

from __future__ import annotations

import time
from functools import partial

from broker.process.testing import jobset
from broker.store.db import runtime
from broker.store.db.runtime import WRITE_BUDGET, within
from clusters.sim.resources import JOBSETS
from tests.locks import ticking, write_transactions

LONG = {"sim.archipelago.io/duration": "1h"}


def test_a_copy_deleted_by_someone_else_as_the_watch_reports_it_is_reported_and_recreated(federation):
    job = federation.submit(jobset("watched", annotations=LONG))
    federation.until_state(job, "Running")
    [placement] = federation.placements(job)
    [copy] = federation.copies(job)
    member = federation.sim.cluster(placement.cluster_name)
    with member.lock:
        member.delete_object(JOBSETS, "team-a", "watched", "Foreground")
    gone = {k: v for k, v in copy.items() if k != "cluster"}
    federation.status.record([(placement.cluster_id, {"type": "DELETED", "object": gone}, time.monotonic())])

    message = f"JobSet team-a/watched was deleted on {placement.cluster_name} by someone else"
    assert [e["message"] for e in federation.job(job)["events"] if e["reason"] == "Drift"] == [
        f"{message}; applying it again"]
    [again] = federation.placements(job)
    assert (again.id, again.state, again.member_uid) == (placement.id, "Applying", None)
    federation.run_until(lambda: [p.state for p in federation.placements(job)] == ["Running"])
    [recreated] = federation.copies(job)
    assert recreated["metadata"]["uid"] != copy["metadata"]["uid"]


def test_watch_events_are_recorded_in_transactions_that_end_when_their_time_is_up(federation, monkeypatch):
    """However few events the recorder takes at once, a transaction stops recording them when it has held the write
    lock about half of WRITE_BUDGET (here each event takes longer): the next records the rest."""
    jobs = [federation.submit(jobset(f"watched-{i}", annotations=LONG)) for i in range(2)]
    for job in jobs:
        federation.until_state(job, "Running")
    events = []
    for job in jobs:
        [placement] = federation.placements(job)
        [copy] = federation.copies(job)
        member = federation.sim.cluster(placement.cluster_name)
        with member.lock:
            member.delete_object(JOBSETS, "team-a", copy["metadata"]["name"], "Foreground")
        gone = {k: v for k, v in copy.items() if k != "cluster"}
        events.append((placement.cluster_id, {"type": "DELETED", "object": gone}, time.monotonic()))
    monkeypatch.setattr(runtime, "within", partial(within, clock=ticking(WRITE_BUDGET)))
    with write_transactions(federation.db) as transactions:
        federation.status.record(events)
    assert len(transactions) == 2
    assert [[e["reason"] for e in federation.job(job)["events"]].count("Drift") for job in jobs] == [1, 1]
