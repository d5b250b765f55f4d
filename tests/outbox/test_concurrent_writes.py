"""Two replicas changing one thing at once on PostgreSQL: a write that reads a cluster's row to change it locks it
first, a job's cancellation is conditional on what it read, namespaces and default queues are given in turn, and a
name taken meanwhile is a conflict, so that none acts on what another committed over in between."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select, update

from broker.services.inventory import MemberMirror, flush
from broker.store.cluster_overrides import create_override
from broker.store.db.models import Cluster, Job, Queue, Tenant
from broker.store.errors import Conflict
from broker.store.inventory import cordon_cluster, update_cluster
from broker.store.jobs import request_cancel
from broker.store.tenancy import Principal, QueueChanges, TenantChanges, create_queue, create_tenant, update_queue
from tests.locks import until_waiting_for_a_lock


def _while_held(outbox, change, then) -> list:
    """What `then()` returns, run in a thread while a transaction that made `change(session)` waits until `then`
    waits for a lock, then commits."""
    done: list = []
    other = threading.Thread(target=lambda: done.append(then()))
    with outbox.db.write() as session:
        change(session)
        session.flush()
        other.start()
        until_waiting_for_a_lock(outbox.db, "the other write never waited for the row")
    other.join(30)
    assert len(done) == 1
    return done[0]


def _cluster(outbox, name: str) -> Cluster:
    with outbox.db.read() as session:
        return session.scalar(select(Cluster).where(Cluster.name == name))


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_member_cordoned_while_its_first_inventory_is_written_stays_cordoned(outbox, settings):
    """A cluster's first inventory makes it Ready, or its admin state if it has one. Cordoned while that inventory
    was being written, it is Cordoned after both, not Ready with a cordon the scheduler does not read."""
    with outbox.db.write() as session:
        session.execute(update(Cluster).where(Cluster.name == "eu-west").values(state="Pending"))
    eu_west = outbox.cluster_id("eu-west")
    _while_held(outbox, lambda session: cordon_cluster(session, "eu-west"),
                lambda: flush(outbox.db, settings, eu_west, MemberMirror()))
    cluster = _cluster(outbox, "eu-west")
    assert (cluster.state, cluster.cordon, cluster.synced_at is not None) == ("Cordoned", "Cordoned", True)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_two_label_edits_at_once_both_land(outbox):
    def edit(session) -> None:
        update_cluster(session, "eu-west", labels={"gpu": "h100"})

    def other_edit() -> None:
        with outbox.db.write() as session:
            update_cluster(session, "eu-west", labels={"zone": "a"})

    _while_held(outbox, edit, other_edit)
    assert _cluster(outbox, "eu-west").labels == {"region": "eu", "gpu": "h100", "zone": "a"}


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_job_that_finishes_while_its_cancel_waits_is_not_cancelled(outbox):
    """A status batch holds the job and records it Succeeded; a cancel that read it Running waits for it, then finds
    it finished: a 409, and no cancel request recorded on a finished job."""
    job = outbox.job({"state": "Running"}, state="Running")

    def finish(session) -> None:
        session.execute(update(Job).where(Job.id == job).values(state="Succeeded"))

    def cancel() -> str:
        with outbox.db.write() as session:
            found = session.get(Job, job)  # read before the batch commits, as the API's request does
            assert found.state == "Running"
            try:
                request_cancel(session, Principal("admin"), job)
            except Conflict as exc:
                return str(exc)
        return "cancelled"

    assert _while_held(outbox, finish, cancel) == f"job {job} is already Succeeded; there is nothing to cancel"
    finished = outbox.read_job(job)
    assert (finished.state, finished.cancel_requested_at) == ("Succeeded", None)
    assert outbox.events(job) == []


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_two_tenants_asking_for_one_namespace_at_once_do_not_both_get_it(outbox):
    def vision(session) -> None:
        create_tenant(session, "vision", TenantChanges(["shared"]))

    def audio() -> str:
        try:
            with outbox.db.write() as session:
                create_tenant(session, "audio", TenantChanges(["shared"]))
        except Conflict as exc:
            return str(exc)
        return "created"

    assert _while_held(outbox, vision, audio) == "namespace 'shared' already belongs to tenant 'vision'"



def _refused(outbox, write) -> str:
    """What Conflict a write in a transaction of its own raised ("done" if none)."""
    try:
        with outbox.db.write() as session:
            write(session)
    except Conflict as exc:
        return str(exc)
    return "done"


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_tenant_or_a_rule_named_meanwhile_is_a_conflict_not_an_error(outbox):
    held = _while_held(outbox, lambda session: create_tenant(session, "vision", TenantChanges(["images"])),
                       lambda: _refused(outbox,
                                        lambda session: create_tenant(session, "vision", TenantChanges(["videos"]))))
    assert held == "tenant 'vision' already exists"
    rule = {"name": "mirror", "cluster": "eu-west", "image": {"registry": "mirror.eu:5000"}}
    held = _while_held(outbox, lambda session: create_override(session, rule),
                       lambda: _refused(outbox, lambda session: create_override(session, rule)))
    assert held == "override rule 'mirror' exists; replace it with PUT /overrides/mirror"


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_tenant_keeps_one_default_queue_whatever_edits_meet(outbox):
    """Its first two queues created at once: the first is its default. Then two queues made its default at once:
    the last one is."""
    with outbox.db.write() as session:
        create_tenant(session, "vision")

    def defaults() -> dict[str, bool]:
        with outbox.db.read() as session:
            return dict(session.execute(select(Queue.name, Queue.is_default).join(Queue.tenant)
                                        .where(Tenant.name == "vision")).all())

    _while_held(outbox, lambda session: create_queue(session, "images", "vision", QueueChanges()),
                lambda: _refused(outbox, lambda session: create_queue(session, "videos", "vision", QueueChanges())))
    assert defaults() == {"images": True, "videos": False}
    with outbox.db.write() as session:
        create_queue(session, "audio", "vision", QueueChanges())
    _while_held(outbox, lambda session: update_queue(session, "videos", QueueChanges(default=True)),
                lambda: _refused(outbox, lambda session: update_queue(session, "audio", QueueChanges(default=True))))
    assert defaults() == {"images": False, "videos": False, "audio": True}
