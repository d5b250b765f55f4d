"""Ask the member before placing (issue #45, case 2): a member whose admission refuses a JobSet (here its JobSet
webhook, with feature gates off) is out for that job, in its own words, before anything is made there; the job goes
to a member that takes it, or fails at once when none would. The parts of a split JobSet are asked by a dry run
first, so no part starts where another is refused; a whole JobSet's apply is the question itself."""

from __future__ import annotations

import copy

import pytest

from broker.process.testing import SCENARIO, jobset

LONG = {"sim.archipelago.io/duration": "1h"}
RESTART_JOB = {"maxRestarts": 1, "rules": [{"name": "restart-jobs", "action": "RestartJob"}]}
CLAIMS = [{"templates": [{"metadata": {"name": "cache"}, "spec": {
    "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}]}]
DENIED = 'admission webhook "vjobset.kb.io" denied the request: '


@pytest.fixture
def scenario() -> dict:
    refusing = copy.deepcopy(SCENARIO)
    refusing["clusters"][0]["jobset_refuses"] = ["RestartJob", "VolumeClaimPolicies"]  # eu-west, first on a tie
    refusing["clusters"][1]["jobset_refuses"] = ["InPlaceRestart"]  # us-east
    return refusing


def _jobset_requests(federation, cluster: str, *, dry_run: bool) -> list:
    """The member's PATCHes of JobSets: its dry runs, or its applies."""
    return [r for r in federation.sim.app.traffic[cluster].requests()
            if r.method == "PATCH" and "/jobsets" in r.path and bool(r.query.get("dryRun")) == dry_run]


def test_a_member_that_refuses_a_jobset_is_out_for_it_and_the_job_runs_on_one_that_takes_it(federation):
    job = federation.submit(jobset("restarts-jobs", annotations=LONG, failure_policy=RESTART_JOB))
    federation.scheduler.run_once()
    assert [p.cluster_name for p in federation.placements(job)] == ["eu-west"]
    federation.dispatcher.run_once()  # eu-west's apply: refused, nothing made there
    queued = federation.job(job)
    assert queued["state"] == "Queued"
    said = [e["message"] for e in queued["events"] if e["reason"] == "Refused"]
    assert said[0].startswith("eu-west refused the JobSet: ") and said[0].endswith(
        f'{DENIED}spec.failurePolicy.rules[0].action: Invalid value: "RestartJob": the RestartJob feature gate is '
        "disabled")
    assert federation.copies(job, cluster="eu-west") == []

    running = federation.until_state(job, "Running")
    assert [(p["cluster"], p["state"]) for p in running["placements"]] == [("eu-west", "Deleted"),
                                                                            ("us-east", "Running")]
    assert len(federation.copies(job, cluster="us-east")) == 1


def test_a_jobset_every_member_refuses_fails_at_once_with_each_members_words(federation):
    both = {**RESTART_JOB, "restartStrategy": "InPlaceRestart"}
    job = federation.submit(jobset("refused-everywhere", annotations=LONG, failure_policy=both))
    failed = federation.until_state(job, "Failed")
    assert failed["reason"].startswith("every member it could run on refused it (eu-west: ")
    assert f'{DENIED}spec.failurePolicy.rules[0].action: Invalid value: "RestartJob"' in failed["reason"]
    assert f'{DENIED}spec.failurePolicy.restartStrategy: Invalid value: "InPlaceRestart"' in failed["reason"]
    assert federation.copies(job) == []  # never made anywhere


def test_no_part_of_a_split_jobset_starts_where_another_part_is_refused(federation):
    """Both parts fit eu-west, which refuses them (a dry run each, asked before any apply): the job goes to us-east
    whole, and eu-west never held a part of it."""
    manifest = jobset("claims", split=True, annotations=LONG, parts=(("a", 1, 1, 8), ("b", 1, 1, 8)))
    manifest["spec"]["volumeClaimPolicies"] = CLAIMS
    job = federation.submit(manifest)
    running = federation.until_state(job, "Running")
    assert {p["part"]: p["cluster"] for p in running["placements"] if p["state"] == "Running"} == {
        "a": "us-east", "b": "us-east"}
    assert _jobset_requests(federation, "eu-west", dry_run=True) and not _jobset_requests(
        federation, "eu-west", dry_run=False)
    assert [e["reason"] for e in running["events"]].count("Refused") >= 1


def test_one_dry_run_answers_for_the_parts_of_one_template_on_a_member(federation):
    jobs = [federation.submit(jobset(f"same-{i}", split=True, annotations={
        **LONG, "archipelago.io/cluster-selector": "region=us"})) for i in range(3)]
    federation.scheduler.run_once()
    federation.dispatcher.run_once()
    assert all(federation.state(job) in ("Dispatching", "Starting", "Running") for job in jobs)
    assert len(_jobset_requests(federation, "us-east", dry_run=True)) == 1
    assert len(_jobset_requests(federation, "us-east", dry_run=False)) == 3
