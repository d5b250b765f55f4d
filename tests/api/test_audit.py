"""The audit trail (issue #51): every mutating route writes exactly one record — a change with its own transaction,
a refusal in one of its own — with who asked, from where, what and how it ended; admins read it, tenants cannot."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from broker.store.db.models import AuditRecord, Queue
from tests.api.conftest import make_tenant

# What is not a change anyone asked for: a pull member's agent reporting, and dry runs.
NOT_AUDITED = re.compile(r"^/api/v1/agent/|:dry-run$")


def records(db) -> list[AuditRecord]:
    with db.sessions() as session:
        return list(session.scalars(select(AuditRecord).order_by(AuditRecord.id)))


def count(db) -> int:
    with db.sessions() as session:
        return session.scalar(select(func.count()).select_from(AuditRecord))


def mutating_routes(app) -> list[tuple[str, str]]:
    document = app.openapi()
    return sorted((method.upper(), path) for path, item in document["paths"].items() for method in item
                  if method in ("post", "put", "patch", "delete") and not NOT_AUDITED.search(path))


def test_every_mutating_route_writes_exactly_one_record(app, admin, db):
    """Walks the OpenAPI document: each mutating route, called as an admin with an empty body (refused, mostly),
    adds one record naming its method and path."""
    routes = mutating_routes(app)
    assert len(routes) >= 20, routes
    missing = []
    for method, path in routes:
        concrete = re.sub(r"\{[^}]+\}", "nothing", path)
        before = count(db)
        answer = admin.request(method, concrete, json={})
        added = records(db)[before:]
        if [(r.method, r.path) for r in added] != [(method, concrete)]:
            missing.append(f"{method} {path} ({answer.status_code}): {[(r.method, r.path) for r in added]}")
    assert missing == []


def test_a_change_is_recorded_with_its_actor_route_and_outcome(app, admin, db):
    with make_tenant(admin, "research", queues={"training": {}}) as research:
        assert admin.patch("/api/v1/queues/training", json={"nominal_quota": {"nvidia.com/gpu": "8"}}).status_code == 200
        assert research.patch("/api/v1/queues/training", json={"nominal_quota": {"nvidia.com/gpu": "80"}}) \
            .status_code == 403
        token_id = research.get("/api/v1/tokens").status_code  # any read: not recorded
        assert token_id in (200, 403)
    quota, refused = records(db)[-2:]
    assert (quota.actor, quota.method, quota.path, quota.route, quota.status, quota.outcome) == (
        "admin", "PATCH", "/api/v1/queues/training", "/api/v1/queues/{name}", 200, "succeeded")
    assert re.fullmatch(r"token \d+ \(tenant research\)", refused.actor) and refused.tenant == "research"
    assert (refused.status, refused.outcome) == (403, "refused")
    assert quota.source == "testclient"
    with db.sessions() as session:  # the change it records was made
        assert session.scalar(select(Queue.nominal_quota).where(Queue.name == "training")) == {"nvidia.com/gpu": 8000}


def test_a_request_refused_at_the_door_is_recorded_as_anonymous(app, db, monkeypatch):
    import api.audit

    monkeypatch.setattr(api.audit, "ANONYMOUS", api.audit.Budget())  # not what earlier tests' strangers took
    with TestClient(app) as stranger:
        assert stranger.post("/api/v1/tenants", json={"name": "x"}).status_code == 401
        assert stranger.post("/api/v1/tenants", json={"name": "x"},
                             headers={"Authorization": "Bearer nope"}).status_code == 401
    assert [(r.actor, r.status, r.outcome) for r in records(db)] == [("anonymous", 401, "refused")] * 2


def test_the_change_and_its_record_commit_together(app, admin, db, monkeypatch):
    """A write that fails at its commit leaves no record of success: the refusal is recorded instead."""
    from broker.store.db import runtime

    checks = []

    def failing_fence_check(*args, **kwargs):  # the first commit fails, between the record's insert and the commit
        checks.append(1)
        if len(checks) == 1:
            raise RuntimeError("the commit fails")

    class Fence:
        check = staticmethod(failing_fence_check)

    monkeypatch.setattr(app.state.db, "fence", Fence())
    monkeypatch.setattr(runtime.Database, "_step_aside", lambda self: None)
    with TestClient(app, headers={"Authorization": "Bearer admin-test-token"}, raise_server_exceptions=False) as client:
        assert client.post("/api/v1/tenants", json={"name": "lost"}).status_code == 500
    monkeypatch.setattr(app.state.db, "fence", None)
    assert [(r.path, r.status, r.outcome) for r in records(db)] == [("/api/v1/tenants", 500, "failed")]
    assert admin.get("/api/v1/tenants/lost").status_code == 404


def test_admins_read_the_trail_newest_first_and_tenants_may_not(admin, db):
    with make_tenant(admin, "research") as research:
        assert research.get("/api/v1/audit").status_code == 403
        research.post("/api/v1/tenants", json={"name": "mine"})
    page = admin.get("/api/v1/audit", params={"limit": 2}).json()
    assert [r["path"] for r in page["items"]] == ["/api/v1/tenants", "/api/v1/tokens"]
    assert page["items"][0]["outcome"] == "refused" and page["next"] is not None
    rest = admin.get("/api/v1/audit", params={"before": page["next"]}).json()
    assert [r["path"] for r in rest["items"]] == ["/api/v1/queues", "/api/v1/tenants"] and rest["next"] is None
    only = admin.get("/api/v1/audit", params={"tenant": "research"}).json()["items"]
    assert [r["outcome"] for r in only] == ["refused"]
    assert admin.get("/api/v1/audit", params={"outcome": "maybe"}).status_code == 422


@pytest.mark.parametrize("path", ["/api/v1/agent/heartbeat", "/api/v1/jobs:dry-run"])
def test_agents_and_dry_runs_are_not_changes(admin, db, path):
    admin.post(path, json={})
    assert count(db) == 0


def test_a_change_is_recorded_in_its_own_transaction_not_after_the_answer(admin, db, monkeypatch):
    """Were the process to die once the change is committed, before the request is answered, its record is there:
    it was committed with the change (the after-answer path, broken here, serves only requests that wrote nothing)."""
    import api.audit

    def lost(*args):
        raise RuntimeError("the process died after the commit")

    monkeypatch.setattr(api.audit, "_record", lost)
    assert admin.post("/api/v1/tenants", json={"name": "kept"}).status_code == 201
    assert [(r.method, r.path, r.outcome) for r in records(db)] == [("POST", "/api/v1/tenants", "succeeded")]


def test_the_kubernetes_front_doors_changes_are_recorded_too(admin, db):
    """Not in the OpenAPI document: kubectl's create and delete through /k8s, each one record; its dry runs none."""
    base = "/k8s/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets"
    admin.post(base, json={})
    admin.post(base, params={"dryRun": "All"}, json={})
    admin.delete(f"{base}/nothing")
    assert [(r.method, r.path) for r in records(db)] == [("POST", base), ("DELETE", f"{base}/nothing")]


def test_a_strangers_flood_is_not_a_flood_of_writes(app, db, monkeypatch):
    """Requests with no known token: at most the bound's records a second, the others counted."""
    import api.audit
    from broker.process.metrics import AUDIT_ANONYMOUS_DROPPED

    now = [1000.0]
    monkeypatch.setattr(api.audit, "ANONYMOUS", api.audit.Budget(per_second=2, clock=lambda: now[0]))
    dropped = AUDIT_ANONYMOUS_DROPPED._value.get()
    with TestClient(app) as stranger:
        for _ in range(5):
            assert stranger.post("/api/v1/tenants", json={"name": "x"}).status_code == 401
        now[0] += 1.0  # the next second
        assert stranger.post("/api/v1/tenants", json={"name": "x"}).status_code == 401
    assert [(r.actor, r.status) for r in records(db)] == [("anonymous", 401)] * 3
    assert AUDIT_ANONYMOUS_DROPPED._value.get() - dropped == 3
