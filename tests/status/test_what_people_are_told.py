"""What the status rules tell people: why a copy is not ready yet, and what happens to a failed split part
and why (broker/engine/status.py)."""

from __future__ import annotations

import pytest

from broker.engine.status import Policy, not_ready, part_failure


def _status(expected: dict[str, int], counts: dict[str, dict[str, int]] | None) -> dict:
    status = {"expected": {name: {"replicas": replicas, "dependsOn": []} for name, replicas in expected.items()}}
    if counts is not None:
        status["replicatedJobs"] = counts
    return status


@pytest.mark.parametrize("expected, counts, told", [
    ({"workers": 4}, {"workers": {"ready": 1, "succeeded": 1}}, "2 of 4 Jobs of workers ready"),
    ({"workers": 4}, {"workers": {"ready": 3}}, "3 of 4 Jobs of workers ready"),
    ({"workers": 4}, {"workers": {"succeeded": 3}}, "3 of 4 Jobs of workers ready"),
    ({"workers": 4}, None, "0 of 4 Jobs of workers ready"),
    ({"driver": 1, "workers": 2}, {"driver": {"ready": 0}, "workers": {"ready": 1}},
     "0 of 1 Jobs of driver ready, 1 of 2 Jobs of workers ready"),
    ({"driver": 1, "workers": 2}, {"driver": {"ready": 1}, "workers": {"ready": 1}}, "1 of 2 Jobs of workers ready"),
    ({"workers": 2}, {"workers": {"ready": 2}}, "the member reports no ready counts"),
    ({}, {}, "the member reports no ready counts"),
])
def test_a_copy_not_ready_says_which_jobs_are_missing(expected, counts, told):
    assert not_ready(_status(expected, counts)) == told


def _policy(failure: dict | None, annotations: dict | None = None) -> Policy:
    manifest = {"metadata": {"annotations": annotations or {}},
                "spec": {"replicatedJobs": [{"name": "a"}, {"name": "b"}],
                         **({"failurePolicy": failure} if failure is not None else {})}}
    return Policy.of(manifest, "split")


@pytest.mark.parametrize("failure, restarts, limit, verdict", [
    (None, 0, None, (False, False, "a failed and the JobSet has no failure policy")),
    ({"maxRestarts": 3}, 0, None, (True, True, "a failed; restarting it alone (restart 1 of 3)")),
    ({"maxRestarts": 3}, 2, None, (True, True, "a failed; restarting it alone (restart 3 of 3)")),
    ({"maxRestarts": 3}, 3, None, (False, False, "a failed beyond its restarts (3 of 3)")),
    ({"maxRestarts": 3}, 3, 5, (True, True, "a failed; restarting it alone (restart 4 of 5)")),  # the caller's limit
    ({"maxRestarts": 3}, 1, 1, (False, False, "a failed beyond its restarts (1 of 1)")),
    ({"maxRestarts": 3, "rules": [{"action": "FailJobSet"}]}, 0, None,
     (False, False, "a failed and the failure policy says FailJobSet")),
    ({"maxRestarts": 0, "rules": [{"action": "RestartJobAndIgnoreMaxRestarts", "targetReplicatedJobs": ["a"]}]}, 4,
     None, (True, False, "a failed; restarting it alone")),
    ({"maxRestarts": 0, "rules": [{"targetReplicatedJobs": ["a"]}]}, 0, None,  # a rule without an action restarts
     (False, False, "a failed beyond its restarts (0 of 0)")),
    # a rule matching failure reasons is the member's to judge: the next rule decides
    ({"maxRestarts": 2, "rules": [{"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]},
                                  {"action": "RestartJobSetAndIgnoreMaxRestarts"}]}, 5, None,
     (True, False, "a failed; restarting it alone")),
    # the first rule that targets the part decides, later ones do not
    ({"maxRestarts": 2, "rules": [{"action": "FailJobSet", "targetReplicatedJobs": ["b"]},
                                  {"action": "RestartJobSet", "targetReplicatedJobs": ["a"]},
                                  {"action": "FailJobSet"}]}, 0, None,
     (True, True, "a failed; restarting it alone (restart 1 of 2)")),
])
def test_a_failed_part_is_restarted_or_fails_the_job_and_says_why(failure, restarts, limit, verdict):
    decision = part_failure(_policy(failure), "a", restarts, limit)
    assert (decision.restart, decision.counted, decision.message) == verdict
