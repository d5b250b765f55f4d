"""The scheduler steps aside while the API in its process answers requests (`broker.process.courtesy`): it waits for the
requests in flight, not longer than it must, and then takes a turn of its own; a request counts until its answer
starts; the engine pauses between decisions and along its walk past parked jobs."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Iterator

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from fastapi.testclient import TestClient

from api.app import RequestsInFlight, create_app
from broker.engine.placement import Config, Parked, Snapshot, schedule, shape_of
from broker.engine.placement.cycle import JOBS_BETWEEN_PAUSES
from broker.engine.placement.snapshot import PLACEMENTS_BETWEEN_PAUSES
from broker.process.courtesy import REQUESTS_FIRST, RequestsFirst
from broker.services.scheduler import SchedulerService
from broker.store.db.fencing import Fence, fenced
from tests.placement.fixtures import cluster, fabric, job, queue, running, snapshot

FOREVER = 3_600.0


def until_pausing(requests: RequestsFirst, threads: int = 1) -> None:
    for _ in range(100_000):
        if requests.waiting == threads:
            return
        threading.Event().wait(0.001)
    raise AssertionError("nobody paused")


def pausing(requests: RequestsFirst, said: list[str]) -> threading.Thread:
    thread = threading.Thread(target=lambda: (requests.pause(), said.append("resumed")), daemon=True)
    thread.start()
    return thread


def test_a_pause_without_requests_in_flight_waits_for_nothing():
    requests = RequestsFirst(defer_at_most=FOREVER)
    thread = pausing(requests, said := [])
    thread.join(30)
    assert said == ["resumed"]


def test_a_pause_waits_until_the_requests_in_flight_are_answered():
    requests, said = RequestsFirst(defer_at_most=FOREVER, clock=lambda: 0.0), []
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
    requests = RequestsFirst(defer_at_most=0.01)
    requests.started()
    thread = pausing(requests, said := [])
    thread.join(30)
    assert said == ["resumed"] and requests.in_flight == 1


def test_the_loops_defer_at_most_their_bound_and_then_run_as_long_before_they_defer_again():
    """Requests back to back, each answered within the bound, slow the loops by half at most: what they defer fills
    a bucket, what they run drains it. (Clock in made-up seconds; a wait lasts until the request is answered.)"""
    now = [0.0]
    requests = RequestsFirst(defer_at_most=1_000.0, clock=lambda: now[0])
    for _ in range(2):  # two requests of 600 s each, back to back: 1,200 s deferred
        requests.started()
        with answering(requests, taking=600.0, clock=now) as waited:
            requests.pause()
        assert waited == [True]
    requests.started()  # the next one, at once
    with answering(requests) as waited:
        requests.pause()
        now[0] += 100.0  # the loops ran 100 s: 1,100 s deferred, still their turn
        requests.pause()
    assert waited == [], "the loops deferred past their bound"
    now[0] += 300.0  # 800 s: they defer again
    with answering(requests) as waited:
        requests.pause()
    assert waited == [True]


@contextmanager
def answering(requests: RequestsFirst, taking: float = 0.0, clock: list[float] | None = None) -> Iterator[list[bool]]:
    """Another thread answers the request in flight once someone pauses for it (`taking` seconds of `clock` later);
    yields whether someone did."""
    waited, done = [], threading.Event()

    def answer() -> None:
        while not done.is_set():
            if requests.waiting:
                waited.append(True)
                if clock is not None:
                    clock[0] += taking
                requests.answered()
                return
            done.wait(0.001)
    thread = threading.Thread(target=answer, daemon=True)
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

    @app.post("/body")
    async def body(request: Request) -> dict:
        return {"size": len(await request.body()), "in_flight": requests.in_flight}

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

        def trickled():
            for _ in range(3):
                seen.append(requests.in_flight)
                yield b"x" * 10
        assert client.post("/body", content=trickled()).json() == {"size": 30, "in_flight": 1}
        assert seen[1:] == [0, 0, 0] and requests.in_flight == 0, "a body trickling in counted"


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
    assert len(pauses) >= len(jobs) // JOBS_BETWEEN_PAUSES  # along the walk


def test_the_loops_database_steps_aside_before_a_transaction_and_never_inside_a_write(db, monkeypatch):
    """The loop services' (fenced) database pauses before each transaction and member call while requests are in
    flight; not the API's, and not inside a write, whose lock a submission may be waiting for."""
    monkeypatch.setattr(REQUESTS_FIRST, "defer_at_most", FOREVER)
    loops = fenced(db, Fence({}))

    def pauses(step: Callable[[], object]) -> bool:
        REQUESTS_FIRST.started()
        try:
            with answering(REQUESTS_FIRST) as waited:
                step()
            return bool(waited)
        finally:
            if not waited:
                REQUESTS_FIRST.answered()

    def transaction(database, *, write: bool = False) -> Callable[[], None]:
        def run() -> None:
            with database.write() if write else database.read():
                pass
        return run

    assert pauses(transaction(loops))
    assert pauses(transaction(loops, write=True))
    assert pauses(loops.ensure_leading)
    assert not pauses(transaction(db)), "the API's own database paused"
    with loops.write():
        assert not pauses(transaction(loops)), "it paused holding the write lock"
        assert not pauses(loops.ensure_leading)


def test_the_api_counts_its_requests_and_the_scheduler_defers_to_them(settings, db):
    """The wiring: the app counts on the process-wide requests, the scheduler pauses on them."""
    app = create_app(settings, db, run_loops=False)
    assert any(m.cls is RequestsInFlight and m.kwargs.get("requests", REQUESTS_FIRST) is REQUESTS_FIRST
               for m in app.user_middleware)
    assert SchedulerService(db, settings).pause == REQUESTS_FIRST.pause


def test_a_snapshot_pauses_between_clusters_and_along_the_running_placements():
    pauses = []
    layout = fabric("a-", leaves=1, nodes_per_leaf=2)
    work = [running(f"r{i}", "a", ["a-leaf-0-n0"], gpus_per_node=0) for i in range(4 * PLACEMENTS_BETWEEN_PAUSES)]
    Snapshot([cluster("a", layout), cluster("b", layout)], [queue("q")], [], work, 60.0,
             pause=lambda: pauses.append(1))
    assert len(pauses) >= 2 + len(work) // PLACEMENTS_BETWEEN_PAUSES
