"""Tenants, queues and tokens through the API, on both databases."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import text

from broker.store.db.models import Token, utcnow
from tests.api.conftest import make_tenant
from tests.api.jobsets import jobset


def test_tenant_lifecycle(admin):
    created = admin.post("/api/v1/tenants", json={"name": "team-a", "namespaces": ["team-a", "team-a-batch"]})
    assert created.status_code == 201
    assert created.json()["namespaces"] == ["team-a", "team-a-batch"]
    assert admin.post("/api/v1/tenants", json={"name": "team-a"}).status_code == 409
    assert [t["name"] for t in admin.get("/api/v1/tenants").json()] == ["team-a"]
    patched = admin.patch("/api/v1/tenants/team-a", json={"namespaces": ["team-a"]})
    assert patched.json()["namespaces"] == ["team-a"]
    assert admin.delete("/api/v1/tenants/team-a").status_code == 204
    assert admin.get("/api/v1/tenants/team-a").status_code == 404


def test_tenant_weight_round_trips_and_sets_fair_shares(admin):
    assert admin.post("/api/v1/tenants", json={"name": "bad", "weight": 0}).status_code == 422
    heavy = make_tenant(admin, "heavy", queues={"h1": {}, "h2": {}, "h3": {}})
    light = make_tenant(admin, "light", queues={"l1": {}})
    assert admin.patch("/api/v1/tenants/heavy", json={"weight": 3}).json()["weight"] == 3
    assert admin.get("/api/v1/tenants/light").json()["weight"] == 1
    for client, queue in ((heavy, "h1"), (heavy, "h2"), (heavy, "h3"), (light, "l1")):
        assert client.post("/api/v1/jobs", json=jobset(f"job-{queue}", queue=queue)).status_code == 201
    shares = {t["name"]: t["fair_share"] for t in admin.get("/api/v1/tenants").json()}
    assert shares == {"heavy": 0.75, "light": 0.25}  # three queues buy heavy nothing beyond its weight
    assert {q["name"]: q["fair_share"] for q in admin.get("/api/v1/queues").json()} == {
        "h1": 0.25, "h2": 0.25, "h3": 0.25, "l1": 0.25}
    patched = admin.patch("/api/v1/tenants/light", json={"weight": 1.5}).json()
    assert (patched["weight"], patched["namespaces"], patched["fair_share"]) == (1.5, ["light"], 0.3333)
    assert admin.get("/api/v1/tenants/heavy").json()["fair_share"] == 0.6667
    assert admin.patch("/api/v1/tenants/light", json={"weight": -1}).status_code == 422
    assert admin.get("/api/v1/tenants/light").json()["fair_share_preemption"] == "Never"
    opted = admin.patch("/api/v1/tenants/light", json={"fair_share_preemption": "LessThanOrEqualToFinalShare"})
    assert (opted.json()["fair_share_preemption"], opted.json()["weight"]) == ("LessThanOrEqualToFinalShare", 1.5)
    assert admin.patch("/api/v1/tenants/light", json={"fair_share_preemption": "Always"}).status_code == 422


def test_a_namespace_belongs_to_one_tenant(admin):
    admin.post("/api/v1/tenants", json={"name": "team-a", "namespaces": ["shared"]})
    clash = admin.post("/api/v1/tenants", json={"name": "team-b", "namespaces": ["shared"]})
    assert clash.status_code == 409
    assert "namespace 'shared' already belongs to tenant 'team-a'" in clash.json()["detail"]


def test_bad_names_say_what_a_name_may_be(admin):
    answer = admin.post("/api/v1/tenants", json={"name": "Team_A"})
    assert answer.status_code == 422
    assert answer.headers["content-type"] == "application/problem+json"
    [error] = answer.json()["errors"]
    assert error["field"] == "name" and "DNS-1123" in error["message"]
    assert "DNS-1123" in answer.json()["detail"]


def test_queue_settings_round_trip(admin):
    admin.post("/api/v1/tenants", json={"name": "research"})
    created = admin.post("/api/v1/queues", json={
        "name": "training", "tenant": "research", "weight": 3, "priority": 5,
        "nominal_quota": {"nvidia.com/gpu": "64", "memory": "2Ti"}, "borrowing_limit": {"nvidia.com/gpu": 16},
        "preemption_policy": "LowerPriority", "reclaim_within_cohort": "Any"})
    assert created.status_code == 201, created.text
    queue = created.json()
    assert queue["nominal_quota"] == {"memory": "2Ti", "nvidia.com/gpu": "64"}
    assert queue["borrowing_limit"] == {"nvidia.com/gpu": "16"}
    assert (queue["weight"], queue["priority"], queue["preemption_policy"], queue["reclaim_within_cohort"]) == (
        3, 5, "LowerPriority", "Any")
    assert admin.patch("/api/v1/queues/training", json={"reclaim_within_cohort": "Sometimes"}).status_code == 422
    assert admin.patch("/api/v1/queues/training", json={"reclaim_within_cohort": "LowerPriority"}).json()[
        "reclaim_within_cohort"] == "LowerPriority"
    assert queue["default"] is True  # a tenant's first queue
    assert (queue["pending"], queue["running"], queue["usage"], queue["lent"]) == (0, 0, {}, {})
    patched = admin.patch("/api/v1/queues/training", json={"weight": 1.5}).json()
    assert patched["weight"] == 1.5 and patched["nominal_quota"] == queue["nominal_quota"]
    assert queue["default_runtime"] is None
    assert admin.patch("/api/v1/queues/training", json={"default_runtime": "2h30m"}).json()["default_runtime"] == 9000
    wrong = admin.patch("/api/v1/queues/training", json={"default_runtime": "a while"})
    assert wrong.status_code == 422 and wrong.json()["errors"][0]["field"] == "default_runtime"
    assert "write it as 90s, 45m, 2h30m or 1d" in wrong.json()["errors"][0]["message"]


def test_queue_errors_name_the_field(admin):
    admin.post("/api/v1/tenants", json={"name": "research"})
    bad_quota = admin.post("/api/v1/queues", json={"name": "q", "tenant": "research",
                                                   "nominal_quota": {"nvidia.com/gpu": "lots"}})
    assert bad_quota.status_code == 422
    assert bad_quota.json()["errors"][0]["field"] == "nominal_quota.nvidia.com/gpu"
    no_tenant = admin.post("/api/v1/queues", json={"name": "q", "tenant": "nobody"})
    assert no_tenant.status_code == 404
    assert admin.post("/api/v1/queues", json={"name": "q", "tenant": "research", "weight": 0}).status_code == 422
    admin.post("/api/v1/queues", json={"name": "q", "tenant": "research"})
    assert admin.post("/api/v1/queues", json={"name": "q", "tenant": "research"}).status_code == 409


def test_only_one_default_queue_per_tenant(admin):
    admin.post("/api/v1/tenants", json={"name": "research"})
    admin.post("/api/v1/queues", json={"name": "a", "tenant": "research"})
    admin.post("/api/v1/queues", json={"name": "b", "tenant": "research", "default": True})
    defaults = [q["name"] for q in admin.get("/api/v1/queues").json() if q["default"]]
    assert defaults == ["b"]


def test_tokens_are_stored_as_hashes_and_can_be_revoked(admin, db):
    admin.post("/api/v1/tenants", json={"name": "research"})
    minted = admin.post("/api/v1/tokens", json={"role": "tenant", "tenant": "research", "description": "ci"})
    assert minted.status_code == 201
    secret = minted.json()["token"]
    with db.engine.connect() as connection:
        stored = " ".join(str(v) for row in connection.execute(text("SELECT * FROM tokens")) for v in row)
    assert secret not in stored
    assert all("token" not in t for t in admin.get("/api/v1/tokens").json())
    tenant = TestClient(admin.app, headers={"Authorization": f"Bearer {secret}"})
    assert tenant.get("/api/v1/queues").status_code == 200
    assert admin.delete(f"/api/v1/tokens/{minted.json()['id']}").json()["revoked_at"] is not None
    refused = tenant.get("/api/v1/queues")
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"


def test_expired_tokens_are_refused(admin, db):
    admin.post("/api/v1/tenants", json={"name": "research"})
    secret = admin.post("/api/v1/tokens", json={"role": "tenant", "tenant": "research",
                                                "expires_in_days": 1}).json()["token"]
    with db.sessions() as session, session.begin():
        session.query(Token).update({Token.expires_at: utcnow() - timedelta(seconds=1)})
    assert TestClient(admin.app, headers={"Authorization": f"Bearer {secret}"}).get("/api/v1/jobs").status_code == 401


def test_no_token_no_entry(app):
    with TestClient(app) as anonymous:
        answer = anonymous.get("/api/v1/jobs")
    assert answer.status_code == 401
    assert answer.json()["detail"] == "send a bearer token: `Authorization: Bearer <token>`"


def test_tenants_cannot_manage(admin):
    with make_tenant(admin, "research") as tenant:
        for method, path, body in [("POST", "/api/v1/tenants", {"name": "x"}),
                                   ("POST", "/api/v1/queues", {"name": "x", "tenant": "research"}),
                                   ("PATCH", "/api/v1/queues/research-default", {"weight": 9}),
                                   ("POST", "/api/v1/tokens", {"role": "admin"}),
                                   ("GET", "/api/v1/tokens", None)]:
            answer = tenant.request(method, path, json=body)
            assert answer.status_code == 403, (method, path)


def test_a_borrowing_limit_can_be_lifted_again(admin):
    admin.post("/api/v1/tenants", json={"name": "research"})
    admin.post("/api/v1/queues", json={"name": "q", "tenant": "research", "borrowing_limit": {"nvidia.com/gpu": 8}})
    assert admin.patch("/api/v1/queues/q", json={"weight": 2}).json()["borrowing_limit"] == {"nvidia.com/gpu": "8"}
    assert admin.patch("/api/v1/queues/q", json={"borrowing_limit": None}).json()["borrowing_limit"] is None


def test_submissions_read_the_token_with_its_tenant_and_refuse_it_as_every_route_does(admin, db):
    """POST /jobs and its dry run read token, tenant and queues in one query of their own
    (broker.store.authentication.authenticate_submitter): a minted admin token names the tenant, a tenant's token its own, and
    revoked or expired tokens are refused there too."""
    admin.post("/api/v1/tenants", json={"name": "research"})
    minted = admin.post("/api/v1/tokens", json={"role": "tenant", "tenant": "research"}).json()
    tenant = TestClient(admin.app, headers={"Authorization": f"Bearer {minted['token']}"})
    no_queue = tenant.post("/api/v1/jobs", json=jobset("a"))
    assert no_queue.status_code == 422 and "tenant research has no default queue" in no_queue.json()["detail"]
    admin.post("/api/v1/queues", json={"name": "training", "tenant": "research"})
    admin.post("/api/v1/queues", json={"name": "eval", "tenant": "research"})
    [job] = tenant.post("/api/v1/jobs", json=jobset("a", queue="eval")).json()["items"]
    assert (job["tenant"], job["queue"]) == ("research", "eval")
    assert tenant.post("/api/v1/jobs:dry-run", json=jobset("b")).status_code == 200

    operator = TestClient(admin.app, headers={"Authorization": "Bearer " + admin.post(
        "/api/v1/tokens", json={"role": "admin"}).json()["token"]})
    [job] = operator.post("/api/v1/jobs", params={"tenant": "research"}, json=jobset("c")).json()["items"]
    assert (job["tenant"], job["queue"]) == ("research", "training")
    assert operator.post("/api/v1/jobs", json=jobset("d")).status_code == 422
    assert operator.post("/api/v1/jobs", params={"tenant": "nobody"}, json=jobset("d")).status_code == 404
    assert operator.post("/api/v1/jobs:dry-run", params={"tenant": "nobody"}, json=jobset("d")).status_code == 404

    with db.sessions() as session, session.begin():
        session.query(Token).where(Token.role == "tenant").update({Token.expires_at: utcnow() - timedelta(seconds=1)})
    for path in ("/api/v1/jobs", "/api/v1/jobs:dry-run"):
        refused = tenant.post(path, json=jobset("e"))
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    admin.delete(f"/api/v1/tokens/{minted['id']}")
    with db.sessions() as session, session.begin():
        session.query(Token).update({Token.expires_at: None})
    assert tenant.post("/api/v1/jobs", json=jobset("e")).status_code == 401
    assert [j["name"] for j in admin.get("/api/v1/jobs").json()["items"]] == ["c", "a"]
