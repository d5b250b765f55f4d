"""Anti-starvation holds end to end: the scheduler loop over a real database (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlalchemy import select

from broker.store.db.models import Job, Node
from tests.placement.fixtures import GPU
from tests.scheduler.conftest import add_cluster, add_queue, placements_of, submit


def leaf(cluster: str, number: int) -> set[str]:
    return {f"{cluster}-leaf-{number}-n{i}" for i in range(8)}


def test_starving_jobs_hold_a_hypernode_each_and_small_jobs_run_beside_them(db, setup, scheduler):
    """Issue 11, case 3: two clusters each half idle, two starving 64-GPU jobs, ten 1-GPU jobs."""
    now = datetime.now(timezone.utc)
    with setup() as session:
        for name in ("eu-west", "us-east"):
            for node in add_cluster(session, name, leaves=4, nodes_per_leaf=8).nodes:
                node.used = {GPU: 4000}  # someone else's pods use half of every node
        big = [submit(session, add_queue(session, f"big-{k}"), f"big-{k}", gpus=8, pods=8) for k in range(2)]
        small_queue = add_queue(session, "small")
        small = [submit(session, small_queue, f"small-{k}", gpus=1) for k in range(10)]
        for k, job in enumerate(big):
            job.submitted_at = now - timedelta(hours=1, seconds=-k)  # past ARCHIPELAGO_PLACEMENT_STARVATION_AFTER
        for job in small:
            job.submitted_at = now
    outcome = scheduler.run_once()
    assert outcome.admitted == sorted(j.id for j in small)
    with db.sessions() as session:
        used = {a["node"] for j in small for p in placements_of(session, j.id) for a in p.assignments}
        clusters = {p.cluster_name for j in small for p in placements_of(session, j.id)}
        reasons = [session.get(Job, j.id).reason for j in big]
    assert clusters == {"eu-west"}, "the cluster with the holds still takes work"
    assert not used & (leaf("eu-west", 0) | leaf("eu-west", 1)), "no job lands on a held node"
    assert reasons == [
        f"no cluster can take it now; the 8 nodes eu-west-leaf-{k}-n0..eu-west-leaf-{k}-n7 of HyperNode leaf-{k} on "
        f"eu-west are held for it because it has waited over 15 min; it waits there for running work of up to "
        f"32 GPUs to end" for k in range(2)]

    assert scheduler.run_once().reasons_written == 0, "the next cycle holds the same nodes again"

    with setup() as session:
        for node in session.scalars(select(Node).where(Node.name.in_(leaf("eu-west", 0)))):
            node.used = {}  # the work on the first hold ends
    assert scheduler.run_once().admitted == [big[0].id]
    with db.sessions() as session:
        [placement] = placements_of(session, big[0].id)
        assert (placement.cluster_name, placement.hypernode) == ("eu-west", "leaf-0")
        assert "leaf-1 on eu-west are held for it" in session.get(Job, big[1].id).reason


def test_a_job_that_declares_it_ends_before_the_reservation_backfills_on_held_nodes(db, setup, scheduler):
    """One leaf of four nodes; job r (declared to run a day) on one of them. A four-node job waiting for an hour holds
    the leaf from r's expected end; a job declaring 10 min runs on a held node meanwhile, one declaring two days waits,
    as does one that declares nothing (EASY backfill: only what would end before the reservation starts)."""
    day = 86400.0
    now = datetime.now(timezone.utc)
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
        r = submit(session, add_queue(session, "running"), "r")
        r.declared_runtime = day
    assert scheduler.run_once().admitted == [r.id]
    with setup() as session:
        big = submit(session, add_queue(session, "big"), "big", pods=4)
        big.submitted_at = now - timedelta(hours=1)
        small = add_queue(session, "small")
        short, long, unsaid = (submit(session, small, name) for name in ("short", "long", "unsaid"))
        short.declared_runtime, long.declared_runtime = 600.0, 2 * day
        for job in (short, long, unsaid):
            job.submitted_at = now
    outcome = scheduler.run_once()
    assert outcome.admitted == [short.id]
    with db.sessions() as session:
        [placement] = placements_of(session, short.id)
        assert placement.cluster_name == "eu-west"
        reasons = {name: session.get(Job, job.id).waiting_reasons["eu-west"] for name, job in
                   (("long", long), ("unsaid", unsaid))}
        assert session.get(Job, big.id).reason.startswith("no cluster can take it now; the 4 nodes")
    for reason in reasons.values():
        assert "held for a job that has waited too long from about" in reason
        assert "(a job whose archipelago.io/expected-runtime ends by then may use them)" in reason


def test_a_tenant_whose_declarations_ran_over_does_not_backfill(db, setup, settings):
    """As above, and tenant research's last jobs each declared 10 min and ran an hour: its short job waits too."""
    from broker.services.scheduler import SchedulerService

    day = 86400.0
    now = datetime.now(timezone.utc)
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
        r = submit(session, add_queue(session, "running", tenant="vision"), "r")
        r.declared_runtime = day
        small = add_queue(session, "small")
        for i in range(5):  # finished: declared 10 min, ran 1 h
            done = submit(session, small, f"done-{i}", state="Succeeded")
            done.declared_runtime, done.started_at = 600.0, now - timedelta(hours=2)
            done.finished_at = now - timedelta(hours=1)
    scheduler = SchedulerService(db, settings)
    assert scheduler.run_once().admitted == [r.id]
    with setup() as session:
        big = submit(session, add_queue(session, "big", tenant="vision"), "big", pods=4)
        big.submitted_at = now - timedelta(hours=1)
        short = submit(session, session.get(type(small), small.id), "short")
        short.declared_runtime, short.submitted_at = 600.0, now
    assert scheduler.run_once().admitted == []
    assert scheduler.config.untrusted_tenants == {"research"}
