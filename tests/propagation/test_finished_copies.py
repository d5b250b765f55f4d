"""Finished means finished (issue #45, case 1): a member's own controllers never make the broker run a job twice.

A JobSet that asks `ttlSecondsAfterFinished: 0` would be deleted by its member's JobSet controller as soon as it
ends; a broker that had not read the end by then (away, relisting, or a pull member's agent between two lists)
would find the copy gone and take it for drift. The copy the broker sends carries no TTL: it records the verdict,
then deletes the copy itself, the tenant's TTL later. Here the member runs its controllers while the broker is
away (no loop between the end and the broker's next list)."""

from __future__ import annotations

from broker.process.testing import jobset
from clusters.sim.resources import JOBSETS

SHORT = {"sim.archipelago.io/duration": "60s"}


def with_ttl(manifest: dict, seconds: int) -> dict:
    manifest["spec"]["ttlSecondsAfterFinished"] = seconds
    return manifest


def test_a_jobset_with_a_ttl_of_zero_runs_once_and_the_broker_deletes_its_copy_after_the_verdict(federation):
    job = federation.submit(with_ttl(jobset("once", annotations=SHORT), 0))
    federation.until_state(job, "Running")
    [copy] = federation.copies(job)

    federation.sim.advance(61)  # it ends while the broker is away: only the member's controllers act
    federation.sim.settle()
    federation.sim.settle()
    done = federation.until_state(job, "Succeeded", "Failed")
    assert done["state"] == "Succeeded"
    federation.run_until(lambda: "CopyDeleted" in federation.reasons(job))  # the broker's own, after the verdict
    assert federation.copies(job) == []
    reasons = federation.reasons(job)
    assert reasons.count("Applied") == 1 and "Drift" not in reasons and "CopyVanished" not in reasons
    assert "CopyDeleted" in reasons
    assert [(p.generation, p.state, p.member_uid) for p in federation.placements(job)] == [(1, "Succeeded", None)]
    assert federation.job(job)["state"] == "Succeeded"
    assert "ttlSecondsAfterFinished" not in copy["spec"]  # the member's TTL controller had nothing to act on


def test_a_finished_copy_stays_on_its_member_for_the_ttl_its_tenant_asked(federation):
    job = federation.submit(with_ttl(jobset("kept", annotations=SHORT), 600))
    federation.until_state(job, "Running")
    federation.sim.advance(61)
    federation.until_state(job, "Succeeded")
    federation.step(300)
    assert len(federation.copies(job)) == 1  # half its TTL: still there for the tenant to look at
    federation.run_until(lambda: "CopyDeleted" in federation.reasons(job), seconds=60)
    assert federation.copies(job) == [] and federation.reasons(job).count("CopyDeleted") == 1


def test_a_running_copy_someone_deletes_while_the_broker_is_away_is_not_run_again(federation):
    """Its end is not known (it may have finished in between): it fails and says so; it is never applied twice."""
    job = federation.submit(jobset("cut", annotations={"sim.archipelago.io/duration": "1h"}))
    [placement] = federation.until_state(job, "Running")["placements"]
    member = federation.sim.cluster(placement["cluster"])
    with member.lock:
        member.delete_object(JOBSETS, "team-a", "cut", "Foreground")
    federation.sim.settle()
    failed = federation.until_state(job, "Failed")
    assert "whether it finished is not known, so it is not run again" in failed["reason"]
    federation.step()
    assert federation.copies(job) == [] and federation.reasons(job).count("Applied") == 1
