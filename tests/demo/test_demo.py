"""`archipelago demo` end to end: members registered, work flowing to Succeeded, an outage survived."""

from __future__ import annotations

import io
import re
import socket

from rich.console import Console

from sqlalchemy import create_engine, func, select

from broker.process.demo import FLAKY_CLUSTER, SCENARIO, run_demo
from broker.store.db.models import Cluster, Event, Job, Placement


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_demo_moves_work_through_the_federation(tmp_path):
    """Piped (no terminal), it says each phase on a line and sums up every 10 s, instead of a live table."""
    printed = io.StringIO()
    state = run_demo(port=_free_port(), workdir=tmp_path / "demo", speed=60, duration=30, outage_after=6,
                     outage_for=10, console=Console(file=printed, force_terminal=False, width=200))
    assert state.errors == [] and state.submitted >= 10
    lines = printed.getvalue().splitlines()
    phases = [line for line in lines if line.startswith("phase: ")]
    assert [p.split(":")[1].strip().split()[0] for p in phases] == ["3", FLAKY_CLUSTER, FLAKY_CLUSTER], phases
    summaries = [line for line in lines if re.match(r"\[\s*\d+ s\] submitted \d+ · Queued \d+", line)]
    assert len(summaries) >= 2 and f"submitted {state.submitted} " in summaries[-1], lines
    assert state.outage == "over"
    engine = create_engine(f"sqlite:///{tmp_path / 'demo' / 'archipelago.db'}")
    with engine.connect() as connection:
        clusters = dict(connection.execute(select(Cluster.name, Cluster.state)).all())
        jobs = dict(connection.execute(select(Job.state, func.count()).group_by(Job.state)).all())
        not_ready = connection.execute(select(func.count()).select_from(Event).where(
            Event.reason == "MemberNotReady")).scalar_one()
        rewritten = dict(connection.execute(select(Placement.cluster_name, Placement.overrides)
                                            .where(Placement.applied_at.is_not(None))).all())
    engine.dispose()
    assert clusters == {c["name"]: "Ready" for c in SCENARIO["clusters"]}  # the lost member came back
    assert jobs.get("Succeeded", 0) >= 3, jobs
    assert sum(jobs.values()) == state.submitted
    assert not_ready >= 1  # the outage was seen
    assert rewritten["h100-eu"] == ["eu-mirror", "h100-fabric"]
    assert rewritten.get("a100-us", []) == []  # the overrides of the EU clusters only


def test_the_demo_only_ever_wipes_its_own_folder(tmp_path):
    import pytest

    from broker.process.demo import DEMO_MARKER, _fresh_workdir

    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    with pytest.raises(SystemExit, match="is not empty and was not made by the demo"):
        _fresh_workdir(precious)
    assert (precious / "thesis.tex").exists()
    earlier = tmp_path / "demo"
    _fresh_workdir(earlier)
    (earlier / "archipelago.db").write_text("old run")
    _fresh_workdir(earlier)
    assert sorted(p.name for p in earlier.iterdir()) == [DEMO_MARKER]
