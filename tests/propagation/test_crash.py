"""The broker process killed (SIGKILL) at each step of the outbox, then started again: every job still
ends, with exactly one copy per placement on the members and none lost.

The broker runs as `archipelago serve` in a subprocess against the simulator (in this process, its
clock moved by the test). The kill point is deterministic: the test hook ARCHIPELAGO_TEST_CRASH_AT
makes the dispatcher kill its own process right after the named step.
"""

from __future__ import annotations

import signal
from typing import Iterator

import httpx
import pytest
from cryptography.fernet import Fernet

from broker.process.testing import SCENARIO, TENANTS, Broker, copies, jobset, wait_for
from broker.services.outcomes import CRASH_AT_ENV
from clusters.jobsets import JOB_ID_LABEL, PLACEMENT_ID_LABEL
from clusters.sim.resources import JOBSETS
from clusters.sim.testing import SimHandle, running_simulator

STEPS = ["applying", "applied-on-member", "applied", "deleting", "deleted-on-member", "deleted"]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimHandle]:
    with running_simulator(SCENARIO, speed=0) as handle:
        yield handle


@pytest.mark.parametrize("step", STEPS)
def test_a_broker_killed_at_each_outbox_step_resumes_with_one_copy_per_placement(sim, tmp_path, step):
    for name in sim.cluster_names:  # the previous test's copies must not count here
        member = sim.cluster(name)
        with member.lock:
            for obj in member.list(JOBSETS, None, JOB_ID_LABEL, None)[0]:
                member.delete_object(JOBSETS, obj["metadata"]["namespace"], obj["metadata"]["name"], "Background")
    broker = Broker(tmp_path, database_url=f"sqlite:///{tmp_path / 'broker.db'}",
                    secret_key=Fernet.generate_key().decode())
    broker.start({CRASH_AT_ENV: step})
    try:
        for tenant, queue in TENANTS[:1]:
            broker.api.post("/api/v1/tenants", json={"name": tenant, "namespaces": [tenant]}).raise_for_status()
            broker.api.post("/api/v1/queues", json={"name": queue, "tenant": tenant}).raise_for_status()
        for name in sim.cluster_names:
            broker.api.post("/api/v1/clusters", json={"name": name, "kubeconfig": sim.kubeconfig(name)}
                            ).raise_for_status()
        short = {"sim.archipelago.io/duration": "30s"}
        manifests = [jobset(f"whole-{step}", annotations=short),
                     jobset(f"split-{step}", split=True, parts=(("a", 1, 2, 8), ("b", 1, 2, 8)), annotations=short),
                     jobset(f"cancel-{step}", annotations={"sim.archipelago.io/duration": "1h"})]
        ids = [broker.api.post("/api/v1/jobs", json=m, params={"tenant": "team-a"}).json()["items"][0]["id"]
               for m in manifests]
        whole, split, cancelled = ids
        if step.startswith("delet"):  # the kill comes with the cancel's deletion
            wait_for(lambda: broker.state(cancelled) == "Running", "the job to cancel to run")
            try:
                broker.api.delete(f"/api/v1/jobs/{cancelled}").raise_for_status()
            except httpx.TransportError:  # killed before it answered: the cancel was committed before
                pass
        assert broker.killed() == -signal.SIGKILL, broker.log()

        broker.start()
        if not step.startswith("delet"):
            wait_for(lambda: broker.state(cancelled) == "Running", "the job to cancel to run")
            broker.api.delete(f"/api/v1/jobs/{cancelled}").raise_for_status()
        wait_for(lambda: [broker.state(i) for i in ids] == ["Succeeded", "Succeeded", "Cancelled"],
                 "every job to end", tick=lambda: sim.advance(10))

        placements = broker.api.get("/api/v1/placements", params={"limit": 100}).json()["items"]
        by_job: dict[int, list[dict]] = {}
        for placement in placements:
            by_job.setdefault(placement["job_id"], []).append(placement)
        assert sorted((p["part"], p["generation"], p["state"]) for p in by_job[whole]) == [("", 1, "Succeeded")]
        assert sorted((p["part"], p["generation"], p["state"]) for p in by_job[split]) == [
            ("a", 1, "Succeeded"), ("b", 1, "Succeeded")]
        assert [p["state"] for p in by_job[cancelled]] == ["Deleted"]
        on_members = sorted(int(c["metadata"]["labels"][PLACEMENT_ID_LABEL]) for c in copies(sim))
        assert on_members == sorted(p["id"] for p in by_job[whole] + by_job[split])  # one copy each, no other
    finally:
        broker.stop()


def test_a_broker_down_while_a_copy_ends_records_its_end_when_it_is_back_and_runs_it_once(sim, tmp_path):
    """The JobSet asks `ttlSecondsAfterFinished: 0`: its member's controller would delete it as it ends, while the
    broker is down. The copy carries no TTL, so the restarted broker's first list finds it finished (issue #45)."""
    broker = Broker(tmp_path, database_url=f"sqlite:///{tmp_path / 'broker.db'}",
                    secret_key=Fernet.generate_key().decode())
    broker.start()
    try:
        tenant, queue = TENANTS[0]
        broker.api.post("/api/v1/tenants", json={"name": tenant, "namespaces": [tenant]}).raise_for_status()
        broker.api.post("/api/v1/queues", json={"name": queue, "tenant": tenant}).raise_for_status()
        for name in sim.cluster_names:
            broker.api.post("/api/v1/clusters", json={"name": name, "kubeconfig": sim.kubeconfig(name)}
                            ).raise_for_status()
        manifest = jobset("ends-alone", annotations={"sim.archipelago.io/duration": "30s"})
        manifest["spec"]["ttlSecondsAfterFinished"] = 0
        job = broker.api.post("/api/v1/jobs", json=manifest, params={"tenant": tenant}).json()["items"][0]["id"]
        wait_for(lambda: broker.state(job) == "Running", "the job to run")
        broker.kill()
        sim.advance(31)  # it ends, the broker away
        sim.settle()
        sim.settle()

        broker.start()
        wait_for(lambda: broker.state(job) in ("Succeeded", "Failed"), "the job to end", tick=lambda: sim.advance(1))
        detail = broker.api.get(f"/api/v1/jobs/{job}").json()
        assert detail["state"] == "Succeeded"
        assert [(p["generation"], p["state"]) for p in detail["placements"]] == [(1, "Succeeded")]
        assert [e["reason"] for e in detail["events"]].count("Applied") == 1
        wait_for(lambda: not [c for c in copies(sim) if c["metadata"]["labels"][JOB_ID_LABEL] == str(job)],
                 "the broker to delete the finished copy")
    finally:
        broker.stop()
