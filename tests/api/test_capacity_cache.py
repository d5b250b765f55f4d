"""The federation's capacity a submission is checked against: read again past its TTL by a thread, not by the
submission that finds it stale (in the leader process, reading thousands of nodes took seconds), and read first
outside the submission's write transaction."""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from broker.engine.placement.model import no_pause
from broker.process.courtesy import RequestsFirst
from broker.store import capacity
from broker.store.capacity import CapacityCache
from broker.store.db.crypto import KubeconfigCipher
from broker.store.db.models import Cluster, inventory_changed
from broker.store.db.session import WRITE_LOCK
from tests.api.conftest import add_cluster_with_leaves
from tests.api.jobsets import jobset
from tests.services.test_courtesy import FOREVER, until_pausing


@pytest.fixture
def reads(monkeypatch) -> tuple[list[str], threading.Event]:
    """Each read's session ("request": the submission's own; "refresh": the cache's own, in its thread or for a
    first read given no session), and an event that lets the cache's own reads end."""
    done, may_end = [], threading.Event()

    def read_capacity(session: str, known, pause=None) -> str:
        done.append(session)
        if session == "refresh":
            assert may_end.wait(10)
        return f"capacity {len(done)}"

    monkeypatch.setattr(capacity, "federation_capacity", read_capacity)
    return done, may_end


def refreshed() -> None:
    for thread in threading.enumerate():
        if thread.name == "capacity":
            thread.join(10)


def test_past_its_ttl_a_submission_gets_the_last_capacity_while_a_thread_reads_it_again(reads):
    done, may_end = reads
    cache = CapacityCache(lambda: nullcontext("refresh"), ttl=0)
    assert cache.get("request") == "capacity 1"  # nothing cached yet: the submission reads it
    assert cache.get("request") == "capacity 1"  # stale: answered at once, a thread reads
    assert cache.get("request") == "capacity 1"  # and only one thread at a time
    assert done == ["request", "refresh"]
    may_end.set()
    refreshed()
    deadline = time.monotonic() + 10
    while cache.get("request") != "capacity 2":
        assert time.monotonic() < deadline
        refreshed()


def test_a_capacity_forgotten_while_a_thread_read_it_is_read_again_by_the_next_submission(reads):
    done, may_end = reads
    cache = CapacityCache(lambda: nullcontext("refresh"), ttl=0)
    cache.get("request")
    cache.get("request")  # the thread reads
    cache.forget()  # a cluster was added meanwhile: what the thread reads may be older
    may_end.set()
    refreshed()
    assert cache.get("request") == "capacity 3"
    assert done == ["request", "refresh", "request"]


def test_with_no_session_given_the_first_read_is_in_a_session_of_its_own(reads):
    done, may_end = reads
    may_end.set()
    cache = CapacityCache(lambda: nullcontext("refresh"), ttl=60)
    assert cache.get() == "capacity 1"
    assert cache.get() == "capacity 1"  # cached: nothing read
    assert done == ["refresh"]


def test_a_submission_reads_the_capacity_before_it_takes_the_write_lock(research, monkeypatch):
    """The first submission after a start reads every cluster's nodes: in its write transaction, that held SQLite's
    write lock a second in the leader process (bench/leader_api.py)."""
    locking = []
    read = capacity.federation_capacity

    def federation_capacity(session, known, pause=no_pause):
        locking.append(bool(session.get_bind().get_execution_options().get(WRITE_LOCK)))
        return read(session, known, pause)

    monkeypatch.setattr(capacity, "federation_capacity", federation_capacity)
    research.app.state.capacity.forget()
    answer = research.post("/api/v1/jobs", json=jobset("first"))
    assert answer.status_code == 201, answer.text
    assert locking == [False]


def test_a_submission_with_no_token_reads_no_capacity(app, monkeypatch):
    """It is answered 401 before anything is read for it."""
    with TestClient(app) as anonymous:
        monkeypatch.setattr(capacity, "federation_capacity", lambda session, known, pause=None: pytest.fail("read"))
        anonymous.app.state.capacity.forget()
        assert anonymous.post("/api/v1/jobs", json=jobset("first")).status_code == 401


def test_the_thread_that_reads_the_capacity_again_waits_while_requests_are_in_flight(db, settings):
    """It reads on no request's behalf, in the process whose requests go first (`broker.process.courtesy`): reading thousands
    of nodes beside them slowed each by as long in the leader process (bench/leader_api.py)."""
    with db.sessions() as session, session.begin():
        add_cluster_with_leaves(session, KubeconfigCipher(settings.fernet_key()), "eu-west", 2, {})
    requests = RequestsFirst(defer_at_most=FOREVER, clock=lambda: 0.0)
    cache = CapacityCache(db.read, ttl=0, requests=requests)
    first = cache.get()
    requests.started()
    assert cache.get() is first  # stale: answered at once, while a thread reads it again
    until_pausing(requests)
    assert cache.get() is first
    requests.answered()
    refreshed()
    assert cache.get() is not first
    refreshed()


def test_the_capacity_is_read_before_the_process_serves(app, monkeypatch):
    """Or the first submission reads it, a second at 8,000 nodes while everything beside it waits."""
    read = []
    monkeypatch.setattr(capacity, "federation_capacity", lambda session, known, pause=None: read.append(session) or "c")
    with TestClient(app) as client:
        assert len(read) == 1
        assert client.app.state.capacity.get() == "c"
    assert len(read) == 1


class ForgottenAtTheFirstPause:
    """Requests in flight all along; at the thread's first pause a cluster is registered (the cache forgotten)."""

    def __init__(self) -> None:
        self.cache, self.pauses = None, 0

    def pause(self) -> None:
        self.pauses += 1
        if self.pauses == 1:
            self.cache.forget()


def test_once_forgotten_the_thread_reading_the_capacity_steps_aside_no_more(db, settings):
    """The next submission reads the capacity itself, waiting for the thread's read to end: pausing for the requests
    in flight would hold up one of them."""
    with db.sessions() as session, session.begin():
        add_cluster_with_leaves(session, KubeconfigCipher(settings.fernet_key()), "eu-west", 2, {})
    requests = ForgottenAtTheFirstPause()
    requests.cache = cache = CapacityCache(db.read, ttl=0, requests=requests)
    cache.get()
    with db.sessions() as session, session.begin():  # its nodes changed: the thread reads and builds them again
        session.execute(inventory_changed(session.scalar(select(Cluster.id))))
    cache.get()  # stale: a thread reads it again
    refreshed()
    assert requests.pauses == 1


def test_a_capacity_that_cannot_be_read_at_start_is_left_to_the_first_submission(app, monkeypatch, caplog):
    """The read before serving is a head start, not a condition of it."""
    def broken(session, known, pause=None):
        raise ValueError("a row it cannot read")

    monkeypatch.setattr(capacity, "federation_capacity", broken)
    with TestClient(app) as client:
        assert client.get("/readyz").status_code == 200
        assert "capacity not read at start" in caplog.text
        monkeypatch.undo()
        assert client.app.state.capacity.get() is not None
