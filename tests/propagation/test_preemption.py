"""Preemption decided by the engine, executed on the member: the victim's copy goes, the victim requeues."""

from __future__ import annotations

import pytest

from broker.process.testing import SCENARIO, jobset


@pytest.fixture
def scenario():
    return {**SCENARIO, "clusters": SCENARIO["clusters"][:1]}


def test_preemption_deletes_the_victim_on_its_member_and_requeues_it(federation):
    low = federation.submit(jobset("low", parts=(("workers", 1, 16, 8),), priority_class="low",
                                   annotations={"sim.archipelago.io/duration": "1h"}))
    federation.until_state(low, "Running")
    high = federation.submit(jobset("high", parts=(("workers", 1, 16, 8),), priority_class="high",
                                    annotations={"sim.archipelago.io/duration": "60s"}))
    federation.until_state(high, "Running")
    victim = federation.job(low)
    assert victim["state"] in ("Queued", "Admitted")  # back in its queue; waits for room
    assert [p["state"] for p in victim["placements"]] == ["Deleted"]
    preempted = [e for e in victim["events"] if e["reason"] == "Preempted"]
    assert preempted and f"job {high}" in preempted[0]["message"]
    assert "Requeued" in federation.reasons(low)
    assert [c["metadata"]["name"] for c in federation.copies()] == ["high"]

    federation.until_state(high, "Succeeded", seconds=30)
    again = federation.until_state(low, "Running")
    assert [(p["generation"], p["state"]) for p in again["placements"]] == [(1, "Deleted"), (2, "Running")]


def test_a_job_that_asks_to_fail_when_preempted_fails_and_its_copy_goes(federation):
    low = federation.submit(jobset("low", parts=(("workers", 1, 16, 8),), priority_class="low",
                                   annotations={"sim.archipelago.io/duration": "1h",
                                                "archipelago.io/on-preemption": "fail"}))
    federation.until_state(low, "Running")
    high = federation.submit(jobset("high", parts=(("workers", 1, 16, 8),), priority_class="high",
                                    annotations={"sim.archipelago.io/duration": "1h"}))
    federation.until_state(high, "Running")
    victim = federation.job(low)
    assert victim["state"] == "Failed" and "on-preemption" in victim["reason"]
    assert [p["state"] for p in victim["placements"]] == ["Deleted"]
    assert "Requeued" not in federation.reasons(low)
    assert [c["metadata"]["name"] for c in federation.copies()] == ["high"]
