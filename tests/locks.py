"""Two transactions that lock the same jobs on PostgreSQL: whether a write takes its row locks in the order every
batch does (jobs ids ascending, each before its placements), so that PostgreSQL never aborts one for a deadlock."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from sqlalchemy import event, text

from broker.store.db.runtime import Database
from broker.store.db.session import WRITE_LOCK
from broker.store.outbox import lock_job_rows, lock_jobs


def against_a_transaction_locking(db: Database, first: int, second: int, write: Callable[[], Any], *,
                                  first_without_placements: bool = False) -> Any:
    """What `write` returns, run in a thread while a transaction that holds the first job (and its placements, or
    only its row as a scheduling commit first does) waits until it waits for a lock, then locks the second (the
    write must hold no lock on it yet) and its placements, and commits. Fails if PostgreSQL aborted either for a
    deadlock."""
    done: list = []
    writer = threading.Thread(target=lambda: done.append(write()))
    with db.write() as session:
        session.execute(text("SET LOCAL lock_timeout = '10s'"))
        (lock_job_rows if first_without_placements else lock_jobs)(session, [first])
        writer.start()
        until_waiting_for_a_lock(db, "the write never waited for the first job")
        lock_jobs(session, [second])
    writer.join(30)
    assert len(done) == 1, "the write did not end: aborted, or still waiting"
    return done[0]


def until_waiting_for_a_lock(db: Database, failure: str) -> None:
    """Return once a session of this database waits for a lock; fail with `failure` if none does within 10 s."""
    deadline = time.monotonic() + 10
    while not waiting_for_a_lock(db):
        assert time.monotonic() < deadline, failure
        time.sleep(0.01)


def waiting_for_a_lock(db: Database) -> bool:
    """Does a session of this database wait for a row lock? (A connection of its own: pg_stat_activity is read
    once per transaction.)"""
    with db.engine.connect() as connection:
        return bool(connection.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                           "AND datname = current_database()")))


@contextmanager
def write_transactions(db: Database) -> Iterator[list[bool]]:
    """A list that grows by one for each write transaction begun on the database meanwhile."""
    begun: list[bool] = []

    def began(connection) -> None:
        if connection.get_execution_options().get(WRITE_LOCK):
            begun.append(True)

    event.listen(db.engine, "begin", began)
    try:
        yield begun
    finally:
        event.remove(db.engine, "begin", began)


def ticking(step: float) -> Callable[[], float]:
    """A clock that moves `step` seconds each time it is read."""
    now = [0.0]

    def read() -> float:
        now[0] += step
        return now[0]
    return read
