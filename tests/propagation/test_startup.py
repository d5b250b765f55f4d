"""Kueue's waitForPodsReady for the federation: a placement whose pods do not all become ready within the
startup timeout is evicted, its job re-queued with back-off away from that member, and failed after the
eviction limit — each step an event that says why (issue #11)."""

from __future__ import annotations

import pytest

from broker.process.testing import jobset

UNPULLABLE = ("registry.invalid/*",)


@pytest.fixture
def settings(settings):
    return settings.model_copy(update={"startup_timeout": 60.0, "startup_backoff": 30.0, "startup_avoid": 600.0,
                                       "startup_eviction_limit": 3})


def _stuck(name: str, **kwargs) -> dict:
    manifest = jobset(name, parts=(("workers", 1, 2, 8),), annotations={"sim.archipelago.io/duration": "1h"},
                      **kwargs)
    manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["image"] = (
        "registry.invalid/train:1")
    return manifest


def _events(federation, job: int, reason: str) -> list[str]:
    return [e["message"] for e in federation.job(job)["events"] if e["reason"] == reason]


def _pull(federation, cluster: str, works: bool) -> None:
    federation.sim.cluster(cluster).unpullable_images = () if works else UNPULLABLE


def test_pods_that_never_become_ready_are_evicted_and_the_job_runs_where_they_do(federation):
    for cluster in ("eu-west", "us-east"):
        _pull(federation, cluster, works=False)
    job = federation.submit(_stuck("stuck"))
    first = federation.until_state(job, "Starting")["placements"][0]["cluster"]
    other = "us-east" if first == "eu-west" else "eu-west"
    for _ in range(10):  # 50 s: within the timeout, nothing happens
        federation.step(5)
    assert federation.state(job) == "Starting" and not _events(federation, job, "Evicted")

    federation.step(15)
    [evicted] = _events(federation, job, "Evicted")
    assert evicted.startswith(f"on {first}: pods not all ready within 60s (0 of 1 Jobs of workers ready; "
                              f"2 pods ImagePullBackOff: Back-off pulling image \"registry.invalid/train:1\")")
    requeued = federation.job(job)
    assert requeued["state"] == "Queued"
    assert requeued["reason"].startswith(f"evicted (1 of 3): placed again after 30s, not on {first} until ")
    assert [p["state"] for p in requeued["placements"]] == ["Deleted"]  # deleted in the same pass
    assert federation.copies(job) == []

    _pull(federation, other, works=True)
    federation.step(20)  # backing off: nothing new is placed
    assert [p["state"] for p in federation.job(job)["placements"]] == ["Deleted"]
    running = federation.until_state(job, "Running")
    assert [(p["cluster"], p["state"]) for p in running["placements"]] == [(first, "Deleted"), (other, "Running")]


def test_a_job_evicted_as_often_as_the_limit_allows_fails_and_says_why(federation):
    for cluster in ("eu-west", "us-east"):
        _pull(federation, cluster, works=False)
    job = federation.submit(_stuck("hopeless"))
    federation.until_state(job, "Starting")
    federation.run_until(lambda: len(_events(federation, job, "Evicted")) == 2, seconds=10, steps=30)
    assert federation.state(job) == "Queued"
    # the back-off doubles with each eviction
    assert [m.split(", not on")[0] for m in _events(federation, job, "Requeued")] == [
        "evicted (1 of 3): placed again after 30s", "evicted (2 of 3): placed again after 60s"]
    # both members avoided for a while: the job waits and says so per member
    federation.step(60)
    waiting = federation.job(job)
    assert waiting["state"] == "Queued" and set(waiting["waiting_reasons"]) == {"eu-west", "us-east"}
    assert all("did not all become ready here within the startup timeout; avoided until" in reason
               for reason in waiting["waiting_reasons"].values())

    failed = federation.until_state(job, "Failed", seconds=10, steps=80)  # once a member is no longer avoided
    assert failed["reason"].startswith("evicted 3 times, the last: on ")
    assert failed["finished_at"] is not None
    assert "ImagePullBackOff" in failed["reason"]
    reasons = [r for r in federation.reasons(job) if r in ("Starting", "Evicted", "Requeued", "Failed")]
    assert reasons == ["Starting", "Evicted", "Requeued"] * 2 + ["Starting", "Evicted", "Failed"]
    # an eviction and the failure are warnings (kubectl's Type column); a re-queue is not
    types = {(e["reason"], e["type"]) for e in failed["events"] if e["reason"] in ("Evicted", "Requeued", "Failed")}
    assert types == {("Evicted", "Warning"), ("Requeued", "Normal"), ("Failed", "Warning")}
    federation.step()
    assert federation.copies(job) == []


def test_a_job_may_ask_for_a_longer_startup_timeout(federation):
    for cluster in ("eu-west", "us-east"):
        _pull(federation, cluster, works=False)
    job = federation.submit(_stuck("patient"))
    patient = _stuck("slow-start")
    patient["metadata"]["annotations"]["archipelago.io/startup-timeout"] = "5m"
    slow = federation.submit(patient)
    federation.run_until(lambda: bool(_events(federation, job, "Evicted")), seconds=10, steps=10)
    assert federation.state(slow) == "Starting"
    federation.run_until(lambda: bool(_events(federation, slow, "Evicted")), seconds=10, steps=30)
    assert "within 300s" in _events(federation, slow, "Evicted")[0]
