"""A member's refusal of a JobSet recorded (broker/store/outbox/apply.py `refuse_apply`): refused by every member,
the job fails; when the job or its placement moved on between the dispatcher's Applying and the member's answer to
the apply (no dry run asked first: the member changed its mind), a cancel makes the job Cancelled, not Failed, and
a placement already being deleted is left to its deletion."""

from __future__ import annotations

from broker.process.testing import jobset
from broker.services import dispatcher
from broker.services.dispatcher import DispatcherService
from broker.store.outbox import request_deletions


def _refused(name: str) -> dict:
    manifest = jobset(name)
    manifest["spec"]["coordinator"] = {"replicatedJob": "nobody"}  # the member refuses it for good
    return manifest


def _at_applying(federation, monkeypatch, then) -> None:
    """One dispatcher pass, which does not ask the member first; `then()` runs once Applying is committed, before the
    member is called."""
    monkeypatch.setattr(DispatcherService, "_ask_admission", lambda self, works, members, found: [])

    def crash_point(step: str) -> None:
        if step == "applying":
            then()
    monkeypatch.setattr(dispatcher, "crash_point", crash_point)
    federation.dispatcher.run_once()


def test_a_job_every_member_refused_ends_when_the_last_refusal_is_recorded(federation):
    job = federation.submit(_refused("refused-now"))
    failed = federation.until_state(job, "Failed")
    assert [p["state"] for p in failed["placements"]] == ["Deleted", "Deleted"]  # nothing made anywhere
    assert failed["reason"].startswith("every member it could run on refused it (eu-west: ")
    assert failed["finished_at"] is not None and failed["finished_at"] == failed["placements"][1]["finished_at"]


def test_a_refusal_of_a_job_cancelled_during_the_apply_ends_it_cancelled_in_the_same_pass(federation, monkeypatch):
    job = federation.submit(_refused("cancelled-meanwhile"))
    federation.scheduler.run_once()
    _at_applying(federation, monkeypatch, lambda: federation.api.delete(f"/api/v1/jobs/{job}"))
    cancelled = federation.job(job)
    assert [p["state"] for p in cancelled["placements"]] == ["Deleted"]  # the refusal: nothing made there
    assert cancelled["state"] == "Cancelled", "the cancel, asked first, says how the job ended"
    assert cancelled["finished_at"] is not None
    assert cancelled["finished_at"] == cancelled["placements"][0]["finished_at"]
    assert federation.reasons(job)[-2:] == ["Refused", "Cancelled"]


def test_a_refusal_for_a_placement_already_being_deleted_is_left_to_its_deletion(federation, monkeypatch):
    job = federation.submit(_refused("deleting-meanwhile"))
    federation.scheduler.run_once()

    def cancel_and_delete() -> None:
        federation.api.delete(f"/api/v1/jobs/{job}")
        with federation.db.write() as session:  # another pass, e.g. another replica's, asks for the deletion
            request_deletions(session, federation.now())
    _at_applying(federation, monkeypatch, cancel_and_delete)
    [placement] = federation.placements(job)
    assert placement.state == "Deleting"  # not Failed: the refusal answered an apply no longer wanted
    assert "Refused" not in federation.reasons(job)
    cancelled = federation.until_state(job, "Cancelled")
    assert [p["state"] for p in cancelled["placements"]] == ["Deleted"]
    assert cancelled["finished_at"] is not None  # when its last copy was gone
    assert cancelled["finished_at"] == cancelled["placements"][0]["finished_at"]
