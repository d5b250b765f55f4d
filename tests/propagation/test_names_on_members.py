"""A JobSet name already taken on the member: by an object the broker did not create (the job fails, the
object stays), or by another live job's copy (the placement waits, with back-off, and never takes it)."""

from __future__ import annotations

from datetime import timedelta

from broker.process.testing import jobset
from clusters.sim.resources import JOBSETS
from tests.propagation.members import put_jobset

LONG = {"sim.archipelago.io/duration": "1h"}
ON_EU = {**LONG, "archipelago.io/cluster-selector": "region=eu"}


def _events(federation, job: int, reason: str) -> list[tuple[str, str]]:
    return [(e["type"], e["message"]) for e in federation.job(job)["events"] if e["reason"] == reason]


def test_a_name_held_by_an_object_the_broker_did_not_create_fails_the_job_and_leaves_the_object(federation):
    foreign = jobset("taken", annotations=ON_EU)
    foreign["metadata"] = {"name": "taken", "namespace": "team-a", "labels": {"app": "theirs"}}
    put_jobset(federation, "eu-west", foreign)
    job = federation.submit(jobset("taken", annotations=ON_EU))
    refused = "eu-west refused the JobSet: a JobSet team-a/taken that Archipelago did not create exists there"

    failed = federation.until_state(job, "Failed", "Running")
    assert (failed["state"], failed["reason"]) == ("Failed", refused)
    assert [(p["state"], p["cluster"]) for p in failed["placements"]] == [("Failed", "eu-west")]
    assert _events(federation, job, "ApplyFailed") == [("Warning", refused)]
    assert _events(federation, job, "Failed") == [("Warning", refused)]
    [theirs] = federation.sim.cluster("eu-west").list(JOBSETS, "team-a", None, None)[0]
    assert theirs["metadata"]["labels"] == {"app": "theirs"}


def test_a_name_held_by_another_live_jobs_copy_is_waited_for_never_taken(federation):
    """A whole job `train-a` and the part `a` of a split job `train` are both `train-a` on the member."""
    whole = federation.submit(jobset("train-a", annotations=ON_EU))
    [holder] = federation.until_state(whole, "Running")["placements"]
    [before] = federation.copies(whole)
    split = federation.submit(jobset("train", parts=(("a", 1, 1, 1),), split=True, annotations=ON_EU))
    federation.scheduler.run_once()

    started = federation.now()
    federation.dispatcher.now = lambda: started  # both passes at one instant, however slow the machine: not due
    federation.dispatcher.run_once()
    held = f"team-a/train-a is still held by placement {holder['id']} of job {whole}"
    [waiting] = federation.placements(split)
    assert (waiting.state, waiting.attempts, waiting.last_error) == ("Applying", 1, held)
    # the first retry backs off 1 s ± 20% from the moment it failed
    assert started + timedelta(seconds=0.8) <= waiting.next_attempt_at <= federation.now() + timedelta(seconds=1.2)
    federation.dispatcher.run_once()  # not due yet: nothing is tried
    assert federation.placements(split)[0].attempts == 1
    federation.dispatcher.now = federation.now
    assert _events(federation, split, "MemberRetrying") == [("Warning", f"eu-west: {held}; retrying")]
    assert [c["metadata"]["uid"] for c in federation.copies(whole)] == [before["metadata"]["uid"]]

    assert federation.api.delete(f"/api/v1/jobs/{whole}").status_code == 202
    federation.until_state(whole, "Cancelled")
    running = federation.until_state(split, "Running")
    assert [(p["part"], p["state"]) for p in running["placements"]] == [("a", "Running")]
    assert [c["metadata"]["name"] for c in federation.copies(split)] == ["train-a"]
    assert len(_events(federation, split, "MemberRetrying")) == 1  # told once, however often it retried
