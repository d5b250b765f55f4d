"""Status corners the documents' tests do not reach (broker/engine/status.py): a member that gives its verdict only in
`terminalState`, and a ReplicatedJob waiting on one that is itself still waiting."""

from __future__ import annotations

from broker.engine.status import member_status, placement_state


def test_a_verdict_given_only_as_the_terminal_state_is_the_placements():
    for terminal, state in (("Completed", "Succeeded"), ("Failed", "Failed")):
        status = member_status({"status": {"terminalState": terminal, "conditions": []}})
        assert status["terminalState"] == terminal
        assert placement_state(status) == state


def test_a_replicated_job_waiting_on_one_that_waits_itself_is_not_expected_up():
    # d is up; x waits for d to complete, so it is not expected yet, and neither is z, which waits for x
    expected = {"d": {"replicas": 1, "dependsOn": []},
                "x": {"replicas": 1, "dependsOn": [{"name": "d", "status": "Complete"}]},
                "z": {"replicas": 1, "dependsOn": [{"name": "x", "status": "Complete"}]}}
    assert placement_state({"expected": expected, "replicatedJobs": {"d": {"ready": 1}}}) == "Running"
