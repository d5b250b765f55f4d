"""A part of a split job deleted on its member by someone else, as its status watch reports it (a DELETED event that
shows it running: broker/store/outbox/follow.py `_drifted`): the report names the part's own JobSet, is a Warning,
and the job keeps its counts beside the drift until the part is back."""

from __future__ import annotations

import time

from broker.process.testing import jobset
from clusters.sim.resources import JOBSETS

LONG = {"sim.archipelago.io/duration": "1h"}


def test_a_split_part_deleted_by_someone_else_is_reported_by_its_own_name_as_a_warning(federation):
    job = federation.submit(jobset("halves", split=True, parts=(("left", 1, 2, 8), ("right", 1, 2, 8)),
                                   annotations=LONG))
    running = federation.until_state(job, "Running")
    [left] = [p for p in running["placements"] if p["part"] == "left"]
    [copy] = [c for c in federation.copies(job) if c["metadata"]["name"] == "halves-left"]
    member = federation.sim.cluster(left["cluster"])
    with member.lock:
        member.delete_object(JOBSETS, "team-a", "halves-left", "Foreground")
    federation.sim.settle()
    gone = {k: v for k, v in copy.items() if k != "cluster"}  # as the watch hands it over; not re-applied yet
    [row] = [p for p in federation.placements(job) if p.part == "left"]
    federation.status.record([(row.cluster_id, {"type": "DELETED", "object": gone}, time.monotonic())])

    seen = federation.job(job)
    message = f"JobSet team-a/halves-left was deleted on {left['cluster']} by someone else"
    assert [(e["message"], e["type"]) for e in seen["events"] if e["reason"] == "Drift"] == [
        (f"{message}; applying it again", "Warning")]
    assert seen["status"]["drift"] == message
    assert [r["name"] for r in seen["status"]["replicatedJobsStatus"]] == ["left", "right"]  # kept beside it
    assert {p["part"]: p["state"] for p in seen["placements"]} == {"left": "Applying", "right": "Running"}
    again = federation.until_state(job, "Running")
    assert [p["id"] for p in again["placements"] if p["part"] == "left"] == [left["id"]]  # the same placement
