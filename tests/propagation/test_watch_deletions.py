"""A copy deleted on its member by someone else, as a status watch reports it (a DELETED event, broker/dispatch.py
`record_status(deleted=True)`): the stepped federation lists instead of watching, so its tests see such a deletion
through the list (`record_list`); here the event is handed to the status loop as its watch would."""

from __future__ import annotations

import time

from clusters.sim.resources import JOBSETS
from tests.propagation.conftest import jobset

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
