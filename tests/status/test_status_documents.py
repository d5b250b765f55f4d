"""The status documents, field by field: what a placement keeps of its member's JobSet, and the job's status
the API shows, folded from its parts (broker/engine/status.py)."""

from __future__ import annotations

import pytest

from broker.engine.status import (Aggregate, PartView, Policy, aggregate, counted_restarts, failure_message,
                                  member_status, newer, placement_state)

ZERO = {"ready": 0, "active": 0, "succeeded": 0, "failed": 0, "suspended": 0}


def test_a_placement_keeps_the_members_counts_expectations_conditions_and_identity():
    condition = {"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "1 Job failed",
                 "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 3}
    status = member_status({
        "metadata": {"uid": "u1", "generation": 3, "resourceVersion": "77"},
        "spec": {"replicatedJobs": [{"name": "driver"},
                                    {"name": "workers", "replicas": 4,
                                     "dependsOn": [{"name": "driver"}, {"name": "init", "status": "Complete"}]}]},
        "status": {"replicatedJobsStatus": [{"name": "workers", "ready": "2", "failed": 1, "active": None}],
                   "conditions": [condition], "restarts": 2, "terminalState": "Failed"}})
    assert status == {
        "replicatedJobs": {"workers": {**ZERO, "ready": 2, "failed": 1}},
        "expected": {"driver": {"replicas": 1, "dependsOn": []},
                     "workers": {"replicas": 4, "dependsOn": [{"name": "driver", "status": "Ready"},
                                                              {"name": "init", "status": "Complete"}]}},
        "conditions": [{k: v for k, v in condition.items() if k != "observedGeneration"}],
        "restarts": 2, "restartsCountTowardsMax": None, "terminalState": "Failed", "uid": "u1", "generation": 3,
        "resourceVersion": "77"}
    assert placement_state(status) == "Failed"


def test_an_empty_jobset_keeps_empty_defaults():
    assert member_status({}) == {"replicatedJobs": {}, "expected": {}, "conditions": [], "restarts": 0,
                                 "restartsCountTowardsMax": None, "terminalState": None, "uid": None, "generation": None, "resourceVersion": None}
    assert placement_state(member_status({})) == "Starting"


@pytest.mark.parametrize("conditions, terminal", [
    ([{"type": "Completed", "status": "True"}], "Completed"),
    ([{"type": "Failed", "status": "True"}], "Failed"),
    ([{"type": "Completed", "status": "False"}], None),
    ([{"type": "Suspended", "status": "True"}], None),
    ([{"type": "Suspended", "status": "True"}, {"type": "Failed", "status": "True"}], "Failed"),
])
def test_without_a_terminal_state_a_true_completed_or_failed_condition_is_one(conditions, terminal):
    assert member_status({"status": {"conditions": conditions}})["terminalState"] == terminal


def _expect(**replicas_and_deps) -> dict:
    return {name: {"replicas": r, "dependsOn": [{"name": d, "status": s} for d, s in deps]}
            for name, (r, deps) in replicas_and_deps.items()}


@pytest.mark.parametrize("expected, counts, state", [
    (_expect(w=(2, ())), {"w": {"ready": 1, "succeeded": 1}}, "Running"),
    (_expect(w=(2, ())), {"w": {"ready": 1}}, "Starting"),
    (_expect(w=(2, ())), {"w": {"succeeded": 1}}, "Starting"),
    # a ReplicatedJob waiting on another's completion is not expected up until that one completed
    (_expect(d=(2, ()), w=(3, [("d", "Complete")])), {"d": {"ready": 2}}, "Running"),
    (_expect(d=(2, ()), w=(3, [("d", "Complete")])), {"d": {"succeeded": 1, "ready": 1}}, "Running"),
    (_expect(d=(2, ()), w=(3, [("d", "Complete")])), {"d": {"succeeded": 2}}, "Starting"),
    (_expect(d=(2, ()), w=(3, [("d", "Complete")])), {"d": {"succeeded": 2}, "w": {"ready": 3}}, "Running"),
    # on another's readiness: expected once that one is up, ready or done
    (_expect(d=(2, ()), w=(1, [("d", "Ready")])), {"d": {"ready": 1}}, "Starting"),
    (_expect(d=(2, ()), w=(1, [("d", "Ready")])), {"d": {"ready": 1, "succeeded": 1}}, "Starting"),
    (_expect(d=(2, ()), w=(1, [("d", "Ready")])), {"d": {"ready": 1, "succeeded": 1}, "w": {"ready": 1}}, "Running"),
    # a dependency this copy does not hold is never met here: what waits on it is not expected up
    (_expect(w=(1, [("gone", "Ready")])), {"gone": {"ready": 1}}, "Running"),
])
def test_a_copy_runs_once_every_replicated_job_due_is_up(expected, counts, state):
    assert placement_state({"expected": expected, "replicatedJobs": counts}) == state


@pytest.mark.parametrize("conditions, message", [
    ([{"type": "Failed", "reason": "FailedJobs", "message": "1 Job failed"}], "1 Job failed"),
    ([{"type": "Completed", "message": "no"}, {"type": "Failed", "reason": "FailedJobs"}], "FailedJobs"),
    ([{"type": "Failed"}], "failed"),
    ([], "failed"),
])
def test_a_failure_is_told_in_the_members_words(conditions, message):
    assert failure_message({"conditions": conditions}) == message
    assert failure_message({}) == "failed"


@pytest.mark.parametrize("status, seen, is_newer", [
    ({"resourceVersion": "10"}, {"resourceVersion": "9"}, True),  # numbers, not strings: "10" < "9"
    ({"resourceVersion": "9"}, {"resourceVersion": "10"}, False),
    ({"resourceVersion": "9"}, {"resourceVersion": "9"}, False),
    ({"resourceVersion": "1"}, {}, True),
    ({}, {"resourceVersion": "1"}, False),
    ({}, {}, False),
    ({"resourceVersion": "b"}, {"resourceVersion": "a"}, True),  # not integers: different is newer
    ({"resourceVersion": "a"}, {"resourceVersion": "a"}, False),
])
def test_a_status_is_newer_by_its_resource_version(status, seen, is_newer):
    assert newer(status, seen) is is_newer


def test_the_policy_defaults_to_all_parts_one_replica_and_no_restarts():
    policy = Policy.of({"spec": {"replicatedJobs": [{"name": "a"}, {"name": "b", "replicas": 3}]}}, "split")
    assert policy == Policy("split", {"a": 1, "b": 3}, "All", ("a", "b"), None, 0)
    targeted = Policy.of({"spec": {"replicatedJobs": [{"name": "a"}, {"name": "b"}],
                                   "successPolicy": {"operator": "Any", "targetReplicatedJobs": ["b"]},
                                   "failurePolicy": {"rules": []}}}, "whole")
    assert targeted == Policy("whole", {"a": 1, "b": 1}, "Any", ("b",), {"rules": []}, 0)


def _view(part, cluster, state, counts=None, conditions=(), restarts=0):
    return PartView(part, cluster, state, {"replicatedJobs": counts or {}, "conditions": list(conditions),
                                           "restarts": restarts})


def test_a_split_jobs_status_sums_its_parts_in_manifest_order_and_tags_their_conditions():
    policy = Policy.of({"spec": {"replicatedJobs": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}}, "split")
    done = {"type": "Completed", "status": "True"}
    result = aggregate(policy, [
        _view("b", "us", "Running", {"b": {"ready": 2, "active": 2}}, restarts=1),
        _view("a", "eu", "Succeeded", {"a": {"succeeded": 1}}, [done], restarts=2),
        _view(None, "ap", "Running", {"x": {"active": 1}}),  # not a part of the manifest: first, counts kept
    ], federation_restarts=4)
    assert result == Aggregate(None, {
        "replicatedJobsStatus": [{"name": "a", **ZERO, "succeeded": 1}, {"name": "b", **ZERO, "ready": 2, "active": 2},
                                 {"name": "c", **ZERO}, {"name": "x", **ZERO, "active": 1}],
        "conditions": [{**done, "part": "a", "cluster": "eu"}],
        "restarts": 7, "restartsCountTowardsMax": 7,
        "parts": [{"part": None, "cluster": "ap", "state": "Running"}, {"part": "a", "cluster": "eu", "state": "Succeeded"},
                  {"part": "b", "cluster": "us", "state": "Running"}]})


def test_a_split_job_succeeds_once_its_policy_holds_and_names_where():
    policy = Policy.of({"spec": {"replicatedJobs": [{"name": "a"}, {"name": "b"}],
                                 "successPolicy": {"operator": "Any"}}}, "split")
    result = aggregate(policy, [_view("a", "us", "Running"), _view("b", "eu", "Succeeded")])
    assert (result.state, result.message, result.status["terminalState"]) == (
        "Succeeded", "success policy (Any) holds over its parts on eu, us", "Completed")


@pytest.mark.parametrize("state, verdict, terminal, message", [
    ("Succeeded", "Succeeded", "Completed", "completed on eu"),
    ("Failed", "Failed", "Failed", "failed on eu: 2 Jobs failed"),
    ("Running", None, None, ""),
])
def test_a_whole_jobs_status_is_its_placements(state, verdict, terminal, message):
    policy = Policy.of({"spec": {"replicatedJobs": [{"name": "w", "replicas": 2}]}}, "whole")
    failed = {"type": "Failed", "status": "True", "message": "2 Jobs failed"}
    result = aggregate(policy, [_view(None, "eu", state, {"w": {"failed": 2}}, [failed], restarts=1)])
    assert (result.state, result.status.get("terminalState"), result.message) == (verdict, terminal, message)
    assert result.status["conditions"] == [{**failed, "cluster": "eu"}]  # no part named for a whole job
    assert result.status["replicatedJobsStatus"] == [{"name": "w", **ZERO, "failed": 2}]
    assert aggregate(policy, []) == Aggregate(None, {"replicatedJobsStatus": [{"name": "w", **ZERO}], "conditions": [],
                                                     "restarts": 0, "restartsCountTowardsMax": 0, "parts": []})


def test_the_restarts_that_count_are_the_members_own_count_where_it_gives_one():
    """JobSet ≥ v0.8 counts apart the restarts its failure policy's rules say do not count toward maxRestarts
    (RestartJobSetAndIgnoreMaxRestarts): the member says which (issue #45, case 3)."""
    jobset = {"status": {"restarts": 5, "restartsCountTowardsMax": 2}}
    assert (member_status(jobset)["restartsCountTowardsMax"], counted_restarts(member_status(jobset))) == (2, 2)
    assert counted_restarts(member_status({"status": {"restarts": 5}})) == 5  # an older controller: all count
    policy = Policy.of({"spec": {"replicatedJobs": [{"name": "w"}]}}, "whole")
    view = PartView(None, "eu", "Running", member_status(jobset))
    assert (aggregate(policy, [view]).status["restarts"], aggregate(policy, [view]).status[
        "restartsCountTowardsMax"]) == (5, 2)


def test_a_part_gone_without_a_verdict_shows_no_pods_ready_or_active_any_more():
    """A finished split job's part that was still running is deleted: its counts keep what it did (succeeded,
    failed), not pods that are gone (issue #45, case 3)."""
    policy = Policy.of({"spec": {"replicatedJobs": [{"name": "a"}, {"name": "b"}],
                                 "successPolicy": {"operator": "Any"}}}, "split")
    for state in ("Deleting", "Deleted"):
        result = aggregate(policy, [_view("a", "eu", "Succeeded", {"a": {"succeeded": 1}}),
                                    _view("b", "us", state, {"b": {"ready": 1, "active": 1, "failed": 1}})])
        assert result.status["replicatedJobsStatus"] == [{"name": "a", **ZERO, "succeeded": 1},
                                                         {"name": "b", **ZERO, "failed": 1}]
