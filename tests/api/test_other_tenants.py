"""Tenants see only themselves: another tenant's job a dry run would preempt is "a job of another tenant" with its
priority and size, never its id or part (an admin sees it), on both databases."""

from __future__ import annotations

from fastapi.testclient import TestClient

from broker.services.scheduler import SchedulerService
from broker.store.db.crypto import KubeconfigCipher
from tests.api.conftest import add_cluster_with_leaves
from tests.api.jobsets import jobset


def _tenant(admin: TestClient, name: str, **fields) -> TestClient:
    assert admin.post("/api/v1/tenants", json={"name": name, **fields}).status_code == 201
    assert admin.post("/api/v1/queues", json={"name": f"{name}-q", "tenant": name}).status_code == 201
    token = admin.post("/api/v1/tokens", json={"role": "tenant", "tenant": name}).json()["token"]
    return TestClient(admin.app, headers={"Authorization": f"Bearer {token}"})


def test_a_dry_run_names_another_tenants_victim_by_priority_and_size_only(admin, db, settings):
    with db.sessions() as session, session.begin():  # 64 GPUs
        add_cluster_with_leaves(session, KubeconfigCipher(settings.fernet_key()), "eu-west", 2, {})
    early = _tenant(admin, "early")
    late = _tenant(admin, "late", fair_share_preemption="LessThanOrEqualToFinalShare")
    for i in range(8):
        assert early.post("/api/v1/jobs", json=jobset(f"gang-{i}", replicas=1)).status_code == 201
    assert SchedulerService(db, settings).run_once().admitted  # early holds all 64 GPUs

    seen = late.post("/api/v1/jobs:dry-run", json=jobset("mine", replicas=1)).json()
    [victim] = seen["preemptions"]
    assert (victim["job"], victim["part"], victim["rule"]) == (None, "", "FairSharing")
    assert victim["reason"].startswith("a job of another tenant (priority 1000, 8 GPUs): ")
    assert "gang-" not in str(seen) and "early" not in str(seen)

    as_admin = admin.post("/api/v1/jobs:dry-run", json=jobset("mine", replicas=1), params={"tenant": "late"}).json()
    [victim] = as_admin["preemptions"]
    assert victim["job"] is not None and victim["rule"] == "FairSharing"
