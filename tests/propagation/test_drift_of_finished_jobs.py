"""A copy lost on its member after its job was cancelled: reported, its placement done with, the job
cancelled, and nothing applied again."""

from __future__ import annotations

from broker.process.testing import jobset
from clusters.sim.resources import JOBSETS

LONG = {"sim.archipelago.io/duration": "1h"}


def test_a_copy_deleted_by_someone_else_after_a_cancel_is_reported_and_not_applied_again(federation):
    job = federation.submit(jobset("leaving", annotations=LONG))
    [placement] = federation.until_state(job, "Running")["placements"]
    assert federation.api.delete(f"/api/v1/jobs/{job}").status_code == 202  # the copy is still Running
    member = federation.sim.cluster(placement["cluster"])
    with member.lock:
        member.delete_object(JOBSETS, "team-a", "leaving", "Foreground")
    federation.sim.settle()  # the member's garbage collector: its Jobs and pods gone, then the JobSet

    federation.status.run_once()  # the status loop sees the copy gone before the dispatcher deleted it
    lost = f"JobSet team-a/leaving was deleted on {placement['cluster']} by someone else"
    detail = federation.job(job)
    assert [(e["type"], e["message"]) for e in detail["events"] if e["reason"] == "Drift"] == [("Warning", lost)]
    assert detail["status"]["drift"] == lost
    assert [(p["id"], p["state"]) for p in detail["placements"]] == [(placement["id"], "Deleted")]
    assert detail["state"] == "Cancelled"

    federation.step()
    assert federation.copies(job) == []
    assert [p["state"] for p in federation.job(job)["placements"]] == ["Deleted"]
