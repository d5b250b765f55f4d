"""The federation's capacity a submission is checked against: read again past its TTL by a thread, not by the
submission that finds it stale (in the leader process, reading thousands of nodes took seconds), and read first
outside the submission's write transaction."""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext

import pytest
from fastapi.testclient import TestClient

from broker import jobs
from broker.db.session import WRITE_LOCK
from broker.jobs import CapacityCache
from tests.api.jobsets import jobset


@pytest.fixture
def reads(monkeypatch) -> tuple[list[str], threading.Event]:
    """Each read's session ("request": the submission's own; "refresh": the cache's own, in its thread or for a
    first read given no session), and an event that lets the cache's own reads end."""
    done, may_end = [], threading.Event()

    def read_capacity(session: str, known) -> str:
        done.append(session)
        if session == "refresh":
            assert may_end.wait(10)
        return f"capacity {len(done)}"

    monkeypatch.setattr(jobs, "federation_capacity", read_capacity)
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
    read = jobs.federation_capacity

    def federation_capacity(session, known):
        locking.append(bool(session.get_bind().get_execution_options().get(WRITE_LOCK)))
        return read(session, known)

    monkeypatch.setattr(jobs, "federation_capacity", federation_capacity)
    research.app.state.capacity.forget()
    answer = research.post("/api/v1/jobs", json=jobset("first"))
    assert answer.status_code == 201, answer.text
    assert locking == [False]


def test_a_submission_with_no_token_reads_no_capacity(app, monkeypatch):
    """It is answered 401 before anything is read for it."""
    monkeypatch.setattr(jobs, "federation_capacity", lambda session, known: pytest.fail("capacity read"))
    with TestClient(app) as anonymous:
        anonymous.app.state.capacity.forget()
        assert anonymous.post("/api/v1/jobs", json=jobset("first")).status_code == 401
