"""The pure status rules: a member's JobSet → a placement's status → the job's, and failed split parts."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from broker.engine.status import Policy, PartView, aggregate, member_status, not_ready, part_failure, placement_state


def jobset(name: str = "train", *, parts: dict[str, int] | None = None, placement: str = "whole",
           success: dict | None = None, failure: dict | None = None, annotations: dict | None = None) -> dict:
    spec: dict = {"replicatedJobs": [{"name": n, "replicas": r} for n, r in (parts or {"workers": 2}).items()]}
    if success:
        spec["successPolicy"] = success
    if failure is not None:
        spec["failurePolicy"] = failure
    return {"metadata": {"name": name, "annotations": {"archipelago.io/placement": placement,
                                                       **(annotations or {})}}, "spec": spec}


def member(**counts_by_rjob) -> dict:
    """A placement status as member_status would build it."""
    return {"replicatedJobs": {name: {"ready": 0, "active": 0, "succeeded": 0, "failed": 0, "suspended": 0, **c}
                               for name, c in counts_by_rjob.items()}, "conditions": [], "restarts": 0}


def test_member_status_reads_counts_conditions_and_terminal_state():
    status = member_status({
        "metadata": {"uid": "u1", "generation": 2, "resourceVersion": "41"},
        "status": {"replicatedJobsStatus": [{"name": "workers", "ready": 1, "active": 2, "succeeded": 0}],
                   "conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
                                   "extra": "dropped"}],
                   "restarts": 1}})
    assert status["replicatedJobs"] == {"workers": {"ready": 1, "active": 2, "succeeded": 0, "failed": 0,
                                                    "suspended": 0}}
    assert status["conditions"] == [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}]
    assert (status["terminalState"], status["restarts"], status["uid"]) == ("Completed", 1, "u1")
    assert placement_state(status) == "Succeeded"



def test_each_condition_is_dated_by_the_broker_when_it_first_sees_it():
    """The member's clock may be skewed (a simulated one runs fast): the broker's own time of each condition is
    kept while the condition stays as it was, and a new one (or one that changed) gets the time it was seen."""
    def jobset(*conditions):
        return {"metadata": {"uid": "u"}, "status": {"conditions": [
            {"type": t, "status": s, "lastTransitionTime": at} for t, s, at in conditions]}}
    first, later = datetime(2026, 12, 7, 4, 0, tzinfo=timezone.utc), datetime(2026, 12, 7, 4, 5, tzinfo=timezone.utc)
    seen = member_status(jobset(("StartupPolicyInProgress", "True", "2026-12-07T09:00:00Z")), None, first)
    again = member_status(jobset(("StartupPolicyInProgress", "False", "2026-12-07T09:30:00Z"),
                                 ("Completed", "True", "2026-12-07T11:00:00Z")), seen, later)
    assert [c["observedTime"] for c in seen["conditions"]] == ["2026-12-07T04:00:00Z"]
    assert [c["observedTime"] for c in again["conditions"]] == ["2026-12-07T04:05:00Z", "2026-12-07T04:05:00Z"]
    kept = member_status(jobset(("Completed", "True", "2026-12-07T11:00:00Z")), again, later + (later - first))
    assert [c["observedTime"] for c in kept["conditions"]] == ["2026-12-07T04:05:00Z"]
    assert "observedTime" not in member_status(jobset(("Completed", "True", "x")))["conditions"][0]

STARTUP = [
    # (case, the member's ReplicatedJobs as (name, replicas, dependsOn), counts by name, state)
    ("nothing reported yet", [("workers", 2, ())], {}, "Starting"),
    ("Jobs active but pods not ready", [("workers", 2, ())], {"workers": {"active": 2, "ready": 1}}, "Starting"),
    ("every Job ready", [("workers", 2, ())], {"workers": {"active": 2, "ready": 2}}, "Running"),
    ("ready and succeeded Jobs together", [("workers", 2, ())], {"workers": {"ready": 1, "succeeded": 1}},
     "Running"),
    ("a failed Job is not a failed JobSet", [("workers", 2, ())], {"workers": {"ready": 1, "failed": 1}},
     "Starting"),
    ("one ReplicatedJob of two ready", [("driver", 1, ()), ("workers", 2, ())],
     {"driver": {"ready": 1}, "workers": {"ready": 1}}, "Starting"),
    ("a ReplicatedJob waiting on its dependency is not expected ready",
     [("driver", 1, ()), ("workers", 2, ({"name": "driver", "status": "Complete"},))],
     {"driver": {"ready": 1}}, "Running"),
    ("once the dependency is met it must be ready too",
     [("driver", 1, ()), ("workers", 2, ({"name": "driver", "status": "Ready"},))],
     {"driver": {"ready": 1}, "workers": {"ready": 0}}, "Starting"),
    ("no counts at all: the member never says it is ready", [("workers", 1, ())], None, "Starting"),
]


@pytest.mark.parametrize("case, rjobs, counts, state", STARTUP, ids=[s[0] for s in STARTUP])
def test_a_placement_is_starting_until_every_pod_is_ready(case, rjobs, counts, state):
    jobset = {"metadata": {"uid": "u"}, "spec": {"replicatedJobs": [
        {"name": name, "replicas": replicas, **({"dependsOn": list(deps)} if deps else {})}
        for name, replicas, deps in rjobs]}, "status": {}}
    if counts is not None:
        jobset["status"]["replicatedJobsStatus"] = [{"name": name, **c} for name, c in counts.items()]
    status = member_status(jobset)
    assert placement_state(status) == state
    if state == "Starting":
        assert " ready" in not_ready(status)


def test_whole_is_the_members_status():
    policy = Policy.of(jobset(), "whole")
    running = aggregate(policy, [PartView("", "eu-west", "Running", member(workers={"active": 2}))])
    assert running.state is None
    assert running.status["replicatedJobsStatus"] == [{"name": "workers", "ready": 0, "active": 2, "succeeded": 0,
                                                       "failed": 0, "suspended": 0}]
    failed = aggregate(policy, [PartView("", "eu-west", "Failed", {**member(), "conditions": [
        {"type": "Failed", "status": "True", "message": "jobset failed due to one or more job failures"}]})])
    assert (failed.state, failed.status["terminalState"]) == ("Failed", "Failed")
    assert failed.message == "failed on eu-west: jobset failed due to one or more job failures"


def test_split_sums_counts_and_succeeds_when_all_targets_did():
    policy = Policy.of(jobset(parts={"shard-a": 2, "shard-b": 2}, placement="split"), "split")
    half = [PartView("shard-a", "eu-west", "Succeeded", member(**{"shard-a": {"succeeded": 2}})),
            PartView("shard-b", "us-east", "Running", member(**{"shard-b": {"active": 2}}))]
    assert aggregate(policy, half).state is None
    done = [half[0], PartView("shard-b", "us-east", "Succeeded", member(**{"shard-b": {"succeeded": 2}}))]
    result = aggregate(policy, done)
    assert (result.state, result.status["terminalState"]) == ("Succeeded", "Completed")
    assert result.message == "success policy (All) holds over its parts on eu-west, us-east"
    assert [p["cluster"] for p in result.status["parts"]] == ["eu-west", "us-east"]


def test_split_success_policy_any_with_targets():
    manifest = jobset(parts={"driver": 1, "workers": 4}, placement="split",
                      success={"operator": "Any", "targetReplicatedJobs": ["driver"]})
    policy = Policy.of(manifest, "split")
    workers_done = [PartView("workers", "a", "Succeeded", member(workers={"succeeded": 4})),
                    PartView("driver", "b", "Running", member(driver={"active": 1}))]
    assert aggregate(policy, workers_done).state is None
    driver_done = [workers_done[0], PartView("driver", "b", "Succeeded", member(driver={"succeeded": 1}))]
    assert aggregate(policy, driver_done).state == "Succeeded"


VERDICTS = [
    # (case, success policy, part -> state, the job's verdict)
    ("All: every part succeeded, counts missing", None, {"a": "Succeeded", "b": "Succeeded", "c": "Succeeded"},
     "Succeeded"),
    ("All: one part still running", None, {"a": "Succeeded", "b": "Succeeded", "c": "Running"}, None),
    ("All over targets: the others may run", {"operator": "All", "targetReplicatedJobs": ["a", "b"]},
     {"a": "Succeeded", "b": "Succeeded", "c": "Running"}, "Succeeded"),
    ("All over targets: one target running", {"operator": "All", "targetReplicatedJobs": ["a", "b"]},
     {"a": "Succeeded", "b": "Running", "c": "Succeeded"}, None),
    ("Any over several targets: the second one suffices", {"operator": "Any", "targetReplicatedJobs": ["a", "b"]},
     {"a": "Running", "b": "Succeeded", "c": "Running"}, "Succeeded"),
    ("Any over several targets: none yet", {"operator": "Any", "targetReplicatedJobs": ["a", "b"]},
     {"a": "Running", "b": "Failed", "c": "Succeeded"}, None),
    ("Any without targets: any part", {"operator": "Any"}, {"a": "Running", "b": "Running", "c": "Succeeded"},
     "Succeeded"),
    ("a part not placed yet has no verdict", None, {"a": "Succeeded", "b": "Succeeded"}, None),
]


@pytest.mark.parametrize("case, success, states, verdict", VERDICTS, ids=[v[0] for v in VERDICTS])
def test_a_split_jobs_verdict_is_its_success_policy_over_its_parts_verdicts(case, success, states, verdict):
    """Counts are all zero here: only the members' verdicts (the placements' states) decide."""
    policy = Policy.of(jobset(parts={"a": 2, "b": 1, "c": 3}, placement="split", success=success), "split")
    parts = [PartView(part, "x", state, member(**{part: {}})) for part, state in states.items()]
    assert aggregate(policy, parts).state == verdict


def test_restarts_add_the_federations_own():
    policy = Policy.of(jobset(parts={"a": 1, "b": 1}, placement="split"), "split")
    parts = [PartView("a", "x", "Running", {**member(a={}), "restarts": 1}),
             PartView("b", "y", "Running", {**member(b={}), "restarts": 2})]
    assert aggregate(policy, parts, federation_restarts=3).status["restarts"] == 6


FAILURES = [
    ("no failure policy: the job fails", None, {}, 0, (False, False)),
    ("default action restarts and counts", {"maxRestarts": 2}, {}, 1, (True, True)),
    ("beyond maxRestarts the job fails", {"maxRestarts": 2}, {}, 2, (False, False)),
    ("FailJobSet rule for the part", {"maxRestarts": 5, "rules": [{"action": "FailJobSet",
                                                                   "targetReplicatedJobs": ["a"]}]}, {}, 0,
     (False, False)),
    ("a rule for another part is skipped", {"maxRestarts": 5, "rules": [{"action": "FailJobSet",
                                                                        "targetReplicatedJobs": ["b"]}]}, {}, 0,
     (True, True)),
    ("an ignore-max action does not count", {"maxRestarts": 0, "rules": [
        {"action": "RestartJobSetAndIgnoreMaxRestarts"}]}, {}, 9, (True, False)),
    ("the annotation raises the limit", {"maxRestarts": 1}, {"archipelago.io/max-restarts": "3"}, 2, (True, True)),
    ("the annotation alone allows restarts", None, {"archipelago.io/max-restarts": "1"}, 0, (True, True)),
    ("the annotation's limit holds", None, {"archipelago.io/max-restarts": "1"}, 1, (False, False)),
]


@pytest.mark.parametrize("case, failure, annotations, restarts, expected", FAILURES, ids=[f[0] for f in FAILURES])
def test_a_failed_split_part(case, failure, annotations, restarts, expected):
    manifest = jobset(parts={"a": 1, "b": 1}, placement="split", failure=failure, annotations=annotations)
    decision = part_failure(Policy.of(manifest, "split"), "a", restarts)
    assert (decision.restart, decision.counted) == expected, decision.message
