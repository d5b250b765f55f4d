"""The scheduler steps aside while the API in its process answers requests (`broker.courtesy`): it waits for the
requests in flight, not longer than it must, and then takes a turn of its own; a request counts until its answer
starts; the engine pauses between decisions and along its walk past parked jobs."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import replace
from typing import Iterator

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from fastapi.testclient import TestClient

from api.app import RequestsInFlight
from broker.courtesy import REQUESTS_FIRST, RequestsFirst
from broker.db.fencing import Fence, fenced
from broker.placement import Config, Parked, schedule, shape_of
from broker.placement.cycle import JOBS_BETWEEN_PAUSES
from tests.placement.fixtures import cluster, fabric, job, queue, snapshot

FOREVER = 3_600.0


def until_pausing(requests: RequestsFirst, threads: int = 1) -> None:
    for _ in range(100_000):
        if requests.waiting == threads:
            return
        threading.Event().wait(0.001)
    raise AssertionError("nobody paused")


def pausing(requests: RequestsFirst, said: list[str]) -> threading.Thread:
    thread = threading.Thread(target=lambda: (requests.pause(), said.append("resumed")))
    thread.start()
    return thread


def test_a_pause_without_requests_in_flight_waits_for_nothing():
    requests = RequestsFirst(wait_at_most=FOREVER)
    thread = pausing(requests, said := [])
    thread.join(30)
    assert said == ["resumed"]


def test_a_pause_waits_until_the_requests_in_flight_are_answered():
    requests, said = RequestsFirst(wait_at_most=FOREVER, clock=lambda: 0.0), []
    requests.started()
    requests.started()
    thread = pausing(requests, said)
    until_pausing(requests)
    requests.answered()
    said.append("one answered")
    requests.answered()
    thread.join(30)
    assert said == ["one answered", "resumed"]
    requests.started()  # the next request: those answered owe the loops nothing
    with answering(requests) as waited:
        requests.pause()
    assert waited == [True]


def test_a_request_that_is_never_answered_holds_a_pause_back_no_longer_than_its_bound():
    requests = RequestsFirst(wait_at_most=0.01)
    requests.started()
    thread = pausing(requests, said := [])
    thread.join(30)
    assert said == ["resumed"] and requests.in_flight == 1


def test_once_a_pause_waited_its_bound_the_loops_take_a_turn_as_long_in_which_nobody_pauses():
    """A stream of requests slows the loops by half at most; it does not stop them."""
    now = [0.0]
    requests = RequestsFirst(wait_at_most=0.01, clock=lambda: now[0])
    requests.started()
    requests.pause()  # nobody answers: the bound, then the loops' turn until 0.01
    requests.wait_at_most = FOREVER  # from now on a pause would wait until the request is answered
    with answering(requests) as waited:
        requests.pause()
        other = pausing(requests, said := [])
        other.join(30)
    assert waited == [] and said == ["resumed"], "a loop paused in the loops' turn"
    now[0] = 0.01  # the turn is over: they defer again
    with answering(requests) as waited:
        requests.pause()
    assert waited == [True]


@contextmanager
def answering(requests: RequestsFirst) -> Iterator[list[bool]]:
    """Another thread answers the request in flight once someone pauses for it; yields whether someone did."""
    waited, done = [], threading.Event()

    def answer() -> None:
        while not done.is_set():
            if requests.waiting:
                waited.append(True)
                requests.answered()
                return
            done.wait(0.001)
    thread = threading.Thread(target=answer)
    thread.start()
    try:
        yield waited
    finally:
        done.set()
        thread.join(30)


def test_a_request_counts_until_its_answer_starts_and_a_stream_not_after_its_headers():
    requests, seen = RequestsFirst(), []
    app = FastAPI()

    @app.get("/plain")
    def plain() -> dict:
        return {"in_flight": requests.in_flight}

    @app.get("/stream")
    def stream() -> StreamingResponse:
        def chunks():
            yield b"first\n"
            seen.append(requests.in_flight)
            yield b"second\n"
        return StreamingResponse(chunks())

    @app.get("/fails")
    def fails() -> dict:
        raise RuntimeError("a bug")

    app.add_middleware(RequestsInFlight, requests=requests)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/plain").json() == {"in_flight": 1}
        assert requests.in_flight == 0
        assert client.get("/stream").text == "first\nsecond\n"
        assert seen == [0] and requests.in_flight == 0
        assert client.get("/fails").status_code == 500
        assert requests.in_flight == 0


def test_the_engine_pauses_between_decisions_and_along_its_walk_past_parked_jobs():
    """A cycle over thousands of parked jobs of one queue is one decision and a long walk: it pauses along it, and
    its decisions are those of a cycle that never pauses."""
    def federation():
        return snapshot([cluster("a", fabric("a-", leaves=1, nodes_per_leaf=2))], [queue("q")], now=60.0)
    jobs = [job("q", gpus=8, pods=4, submitted_at=float(i)) for i in range(6 * JOBS_BETWEEN_PAUSES)]
    jobs = [replace(j, shape=shape_of(j.spec)) for j in jobs]
    first = schedule(federation(), jobs, Config())
    assert not first.placements and first.inadmissible == {j.id for j in jobs}  # 4 pods of 8 GPUs on 2 nodes

    pauses = []
    again = schedule(federation(), jobs, Config(), Parked(first.inadmissible), pause=lambda: pauses.append(1))
    assert again == schedule(federation(), jobs, Config(), Parked(first.inadmissible))
    assert len(pauses) >= 2 * len(jobs) // JOBS_BETWEEN_PAUSES  # along the queues' grouping, and along the walk


def test_the_loops_database_steps_aside_before_a_transaction_and_never_inside_a_write(db, monkeypatch):
    """The loop services' (fenced) database pauses before each transaction while requests are in flight; not the
    API's, and not inside a write, whose lock a submission may be waiting for."""
    monkeypatch.setattr(REQUESTS_FIRST, "wait_at_most", FOREVER)
    loops = fenced(db, Fence({}))
    REQUESTS_FIRST.started()
    with answering(REQUESTS_FIRST) as waited, loops.read():
        pass
    assert waited == [True]
    REQUESTS_FIRST.started()
    try:
        with answering(REQUESTS_FIRST) as waited, db.read():
            pass
        assert waited == [], "the API's own database paused"
    finally:
        REQUESTS_FIRST.answered()
    with loops.write():
        REQUESTS_FIRST.started()
        try:
            with answering(REQUESTS_FIRST) as waited, loops.read():
                pass
            assert waited == [], "it paused holding the write lock"
        finally:
            REQUESTS_FIRST.answered()
