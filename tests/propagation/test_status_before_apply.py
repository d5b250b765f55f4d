"""The status watch may see a copy between the member's answer to the apply and the dispatcher's record of
that answer (broker/store/outbox/ `record_status` while Applying, then `finish_apply`): the placement keeps
the newer of the two, whichever came first."""

from __future__ import annotations

from broker.process.testing import jobset
from broker.services import dispatcher
from clusters.sim.resources import JOBSETS

LONG = {"sim.archipelago.io/duration": "1h"}
MOVED_ON = {"type": "Progressing", "status": "True", "reason": "Test", "message": "moved on",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}


def _watch_between_answer_and_record(federation, monkeypatch, job: int, name: str) -> list:
    """At the dispatcher's `applied-on-member` step the copy's status moves on and the status loop reads it.
    Returns the placement's state and its status's condition messages as the status loop left them."""
    seen: list = []

    def crash_point(step: str) -> None:
        if step != "applied-on-member":
            return
        federation.sim.settle()  # the member's controllers have made its Jobs and pods (not "by now": told to)
        [copy] = federation.copies(job)
        member = federation.sim.cluster(copy["cluster"])
        with member.lock:
            member.patch(JOBSETS, "team-a", name, "merge", {"status": {"conditions": [MOVED_ON]}}, "test",
                         subresource="status")
        federation.status.run_once()
        [placement] = federation.placements(job)
        seen.extend([placement.state, [c["message"] for c in (placement.status or {}).get("conditions", ())]])
    monkeypatch.setattr(dispatcher, "crash_point", crash_point)
    federation.dispatcher.run_once()
    return seen


def test_a_status_seen_before_the_apply_is_recorded_is_kept_and_followed(federation, monkeypatch):
    job = federation.submit(jobset("early-news", annotations=LONG))
    federation.scheduler.run_once()
    assert _watch_between_answer_and_record(federation, monkeypatch, job, "early-news") == [
        "Applying", ["moved on"]]
    [placement] = federation.placements(job)
    assert placement.state == "Running"  # the watch's status said so, and the record followed it
    assert [c["message"] for c in placement.status["conditions"]] == ["moved on"], "the apply's older answer lost"
    assert placement.status["appliedGeneration"] == 1
    [applied] = [e["message"] for e in federation.job(job)["events"] if e["reason"] == "Applied"]
    assert applied == (f"applied team-a/early-news on {placement.cluster_name} (placement {placement.id}, "
                       f"generation 1)")
