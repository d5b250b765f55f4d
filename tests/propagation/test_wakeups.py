"""Wake-ups across replicas: a submission through an API-only replica starts the leader's cycle at once
(PostgreSQL NOTIFY, sent by the jobs table's trigger), not at the leader's next interval."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from broker.process.testing import jobset
from tests.propagation.conftest import ADMIN

DEADLINE = 30.0


def through_the_kubernetes_api(federation, manifest: dict) -> int:
    namespace = manifest["metadata"]["namespace"]
    answer = federation.api.post(f"/k8s/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets",
                                 json=manifest)
    assert answer.status_code == 201, answer.text
    return int(answer.json()["metadata"]["annotations"]["archipelago.io/job-id"])


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("submit", [lambda federation, manifest: federation.submit(manifest),
                                    through_the_kubernetes_api], ids=["jobs-api", "kubernetes-api"])
def test_a_submission_on_an_api_only_replica_wakes_the_leaders_scheduler(federation, settings, db, submit):
    # The leader's scheduler runs once at start, then only when woken: its interval is an hour.
    leader_settings = settings.model_copy(update={"scheduler_interval": 3600.0})
    with TestClient(create_app(leader_settings, db, run_loops=True), headers=ADMIN) as leader:
        wakeups = leader.app.state.services
        assert wakeups.listening.wait(DEADLINE), "the leader never listened"
        assert wakeups.loops[0].running  # the leader's loops
        for name in ("first", "second"):  # the first may ride the wake-up the leader gives itself on listening
            job_id = submit(federation, jobset(f"woken-{name}"))  # through the API-only replica (no loops)
            deadline = time.monotonic() + DEADLINE
            while federation.state(job_id) == "Queued":
                assert time.monotonic() < deadline, f"job {name} was not admitted: no wake-up reached the leader"
                time.sleep(0.05)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_submission_wakes_the_scheduler_of_its_own_process(federation, settings, db):
    # SQLite: one process runs everything; the submission hands the wake-up to its loops once it has committed.
    leader_settings = settings.model_copy(update={"scheduler_interval": 3600.0})
    with TestClient(create_app(leader_settings, db, run_loops=True), headers=ADMIN) as leader:
        assert leader.app.state.services.loops[0].running
        for name in ("first", "second"):  # the first may ride the cycle the loops run when they start
            answer = leader.post("/api/v1/jobs", json=jobset(f"woken-{name}"), params={"tenant": "team-a"})
            assert answer.status_code == 201, answer.text
            job_id = answer.json()["items"][0]["id"]
            deadline = time.monotonic() + DEADLINE
            while federation.state(job_id) == "Queued":
                assert time.monotonic() < deadline, f"job {name} was not admitted: the wake-up was lost"
                time.sleep(0.05)
