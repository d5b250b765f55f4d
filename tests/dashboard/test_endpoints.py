"""The dashboard's own endpoints on both backends: pages, whoami, queue history, a cluster's topology."""

from __future__ import annotations

import re
from datetime import timedelta

from broker.store.db.models import Job, Placement, Queue, utcnow
from broker.store.queue_history import queue_history, sample_times
from tests.api.conftest import admin, app, make_tenant  # noqa: F401  (fixtures)
from tests.api.jobsets import jobset


def test_pages_are_served_and_static_files_only_by_name(admin):
    for path in ("/", "/clusters", "/clusters/eu-west", "/queues", "/jobs", "/jobs/7", "/login"):
        answer = admin.get(path)
        assert answer.status_code == 200, path
        assert path == "/login" or '<nav aria-label="Main">' in answer.text, path
    assert admin.get("/static/app.js").headers["content-type"].startswith("text/javascript")
    assert admin.get("/static/..%2Fapp.py").status_code == 404
    assert admin.get("/static/missing.js").status_code == 404


def test_pages_carry_a_content_security_policy_and_nothing_is_sniffed_or_framed(admin):
    for path in ("/", "/login", "/jobs/7"):
        headers = admin.get(path).headers
        assert "script-src 'self';" in headers["content-security-policy"]
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert (headers["x-frame-options"], headers["x-content-type-options"]) == ("DENY", "nosniff")
    for path in ("/static/app.js", "/api/v1/whoami", "/healthz"):
        assert admin.get(path).headers["x-content-type-options"] == "nosniff", path


def test_the_api_docs_are_served_from_the_installed_swagger_ui(admin):
    page = admin.get("/docs")
    assert page.status_code == 200 and "/openapi.json" in page.text
    scripts = re.findall(r'<(?:script|link)[^>]*(?:src|href)="([^"]+)"', page.text)
    assert scripts and all(url.startswith("/docs/static/") for url in scripts), scripts
    for url in scripts:
        assert admin.get(url).status_code == 200, url
    assert admin.get("/redoc").status_code == 404  # it would load from a CDN


def test_whoami_names_the_principal(admin):
    assert admin.get("/api/v1/whoami").json() == {"role": "admin", "tenant": None}
    with make_tenant(admin, "research") as research:
        assert research.get("/api/v1/whoami").json() == {"role": "tenant", "tenant": "research"}
    assert admin.get("/api/v1/whoami", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_queue_history_is_per_visible_queue(admin):
    with make_tenant(admin, "research") as research, make_tenant(admin, "vision"):
        assert research.post("/api/v1/jobs", json=jobset("a")).status_code == 201
        mine = research.get("/api/v1/queue-history", params={"minutes": 10, "points": 5}).json()
        everyone = admin.get("/api/v1/queue-history", params={"minutes": 10, "points": 5}).json()
    assert [q["name"] for q in mine["queues"]] == ["research-default"]
    assert [q["name"] for q in everyone["queues"]] == ["research-default", "vision-default"]
    assert len(mine["times"]) == 6 and mine["queues"][0]["pending"][-1] == 1
    assert admin.get("/api/v1/queue-history", params={"points": 1}).status_code == 422


def test_queue_history_follows_the_timestamps(admin, db):
    with make_tenant(admin, "research") as research:
        ids = [research.post("/api/v1/jobs", json=jobset(name)).json()["items"][0]["id"] for name in ("a", "b")]
    now = utcnow()
    times = sample_times(now, timedelta(minutes=60), timedelta(minutes=10))  # -60, -50, ..., 0
    with db.sessions() as session:
        a, b = session.get(Job, ids[0]), session.get(Job, ids[1])
        a.submitted_at, a.admitted_at, a.started_at = now - timedelta(minutes=55), now - timedelta(minutes=35), \
            now - timedelta(minutes=30)
        a.state, a.finished_at = "Succeeded", now - timedelta(minutes=15)
        b.submitted_at = now - timedelta(minutes=45)  # still queued
        session.add(Placement(job_id=a.id, cluster_name="x", state="Succeeded", resources={"nvidia.com/gpu": 8000},
                              created_at=a.admitted_at, finished_at=a.finished_at))
        session.commit()
        queue_id = session.query(Queue.id).scalar()
        history = queue_history(session, [queue_id], {"nvidia.com/gpu": 32000}, times)[queue_id]
    assert history.pending == [0, 1, 2, 1, 1, 1, 1]  # a waits -55..-35, b from -45 on
    assert history.running == [0, 0, 0, 1, 1, 0, 0]  # a runs -30..-15
    assert history.dominant_share == [0, 0, 0, 0.25, 0.25, 0, 0]  # 8 of 32 GPUs while a holds them


def test_topology_of_an_unknown_cluster_is_404(admin):
    answer = admin.get("/api/v1/topology/nowhere")
    assert answer.status_code == 404 and "not registered" in answer.json()["detail"]
