"""Health: an unreachable member is NotReady within grace + one probe interval and Ready again once
it answers; cordon, drain and remove do what an operator expects; the CLI drives them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from broker.cli.app import app as cli
from broker.store.db.models import Cluster, Event, Job, Placement, Queue, Tenant
from tests.clusters.conftest import register
from tests.servers import serving

GRACE, INTERVAL = 20.0, 5.0


class Clock:
    def __init__(self) -> None:
        self.at = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.at

    def tick(self) -> None:
        self.at += timedelta(seconds=INTERVAL)


def _state(db, name: str) -> Cluster:
    with db.sessions() as session:
        return session.scalar(select(Cluster).where(Cluster.name == name))


def test_unreachable_member_is_not_ready_within_grace_and_ready_after_it_heals(api, sim, db, health):
    register(api, sim, "crd")
    register(api, sim, "labels")
    clock = health.now = Clock()
    health.settings = health.settings.model_copy(update={"not_ready_grace": GRACE})
    assert health.run_once() == {"crd": "Ready", "labels": "Ready"}

    sim.make_unreachable("crd")  # just after a heartbeat
    probes = 0
    while health.run_once()["crd"] != "NotReady":
        clock.tick()
        probes += 1
        assert probes * INTERVAL <= GRACE + INTERVAL, "still Ready after grace + one interval"
    assert probes * INTERVAL >= GRACE, "NotReady before the grace had passed"
    crd = _state(db, "crd")
    assert "cannot reach" in crd.last_error and crd.unreachable_since is not None
    assert _state(db, "labels").state == "Ready"

    sim.heal("crd")
    clock.tick()
    assert health.run_once()["crd"] == "Ready"
    crd = _state(db, "crd")
    assert crd.last_error is None and crd.unreachable_since is None
    with db.sessions() as session:
        reasons = session.scalars(select(Event.reason).where(Event.object_id == "crd").order_by(Event.id)).all()
    assert reasons[-2:] == ["MemberNotReady", "MemberReady"]


def test_a_cordoned_member_stays_cordoned_through_an_outage(api, sim, db, health):
    register(api, sim, "crd")
    assert api.post("/api/v1/clusters/crd/cordon").json()["state"] == "Cordoned"
    health.settings = health.settings.model_copy(update={"not_ready_grace": 0.0})
    sim.make_unreachable("crd")
    assert health.run_once() == {"crd": "NotReady"}
    sim.heal("crd")
    assert health.run_once() == {"crd": "Cordoned"}
    assert api.post("/api/v1/clusters/crd/uncordon").json()["state"] == "Ready"


def _placement(db, cluster: str, state: str) -> None:
    with db.write() as session:
        tenant = session.scalar(select(Tenant)) or Tenant(name="research", namespaces=["research"])
        queue = session.scalar(select(Queue)) or Queue(name="training", tenant=tenant)
        job = Job(tenant=tenant, queue=queue, name=f"job-{state.lower()}", namespace="research", manifest={})
        session.add(job)
        session.flush()
        row = session.scalar(select(Cluster).where(Cluster.name == cluster))
        session.add(Placement(job_id=job.id, cluster_id=row.id, cluster_name=cluster, state=state))


def test_drain_counts_what_must_move_and_remove_refuses_live_placements(api, sim, db):
    register(api, sim, "crd")
    _placement(db, "crd", "Starting")
    _placement(db, "crd", "Running")
    drained = api.post("/api/v1/clusters/crd/drain").json()
    assert drained["state"] == "Draining" and drained["placements_to_move"] == 1

    refused = api.delete("/api/v1/clusters/crd")
    assert refused.status_code == 409 and "2 live placement(s)" in refused.json()["detail"]
    assert api.delete("/api/v1/clusters/crd", params={"force": True}).status_code == 204
    assert api.get("/api/v1/clusters/crd").status_code == 404
    with db.sessions() as session:
        assert all(p.cluster_id is None for p in session.scalars(select(Placement)))


@pytest.mark.parametrize("backend", ["sqlite"])
def test_cli_manages_clusters(settings, db, sim, tmp_path, monkeypatch, backend):
    from api.app import create_app

    kubeconfig = tmp_path / "crd.kubeconfig"
    kubeconfig.write_text(sim.kubeconfig("crd"))
    with serving(create_app(settings, db, run_loops=False)) as url:
        monkeypatch.setenv("ARCHIPELAGO_SERVER", url)
        monkeypatch.setenv("ARCHIPELAGO_TOKEN", "admin-test-token")
        monkeypatch.setenv("ARCHIPELAGO_CONFIG", "/nonexistent/config.yaml")

        def run(*args: str):
            return CliRunner().invoke(cli, ["clusters", *args], env={"COLUMNS": "200"}, catch_exceptions=False)

        added = run("add", "crd", "--kubeconfig", str(kubeconfig), "--label", "region=eu", "-o", "json")
        assert added.exit_code == 0, added.output
        assert json.loads(added.output)["labels"] == {"region": "eu"}
        table = run("list")
        assert "crd" in table.output and "Ready" in table.output and "48/48" in table.output
        shown = run("get", "crd")
        assert "root (tier 3, 12 nodes" in shown.output and "  spine-0 (tier 2, 8 nodes" in shown.output
        assert "Cordoned" in run("cordon", "crd").output
        assert "Draining" in run("drain", "crd").output
        again = run("add", "crd", "--kubeconfig", str(kubeconfig))
        assert again.exit_code == 1 and again.output.count("\n") == 1 and "already registered" in again.output
        assert run("remove", "crd").exit_code == 0
        assert json.loads(run("list", "-o", "json").output) == []
