"""`Database.read` and `Database.write`, the only two ways the broker opens a transaction: what each guarantees,
on both databases."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from functools import partial

import pytest
from sqlalchemy import event, select, update

from broker.store.db import runtime
from broker.store.db.fencing import Fence, Fenced, fenced
from broker.store.db.models import LEADER, Lease
from broker.store.db.runtime import WRITE_BUDGET, WriteSlices, open_database, record_in_turns, within
from tests.locks import ticking

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


@pytest.fixture
def counter(db) -> str:
    """A row whose integer column the tests count with (a lease's token)."""
    with db.write() as session:
        session.add(Lease(name="counter", holder=None, token=0, expires_at=NOW))
    return "counter"


def _count(session, name: str) -> int:
    return session.scalar(select(Lease.token).where(Lease.name == name))


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_two_writers_on_sqlite_both_commit_one_after_the_other(db, settings, counter):
    """Two processes' writes, each reading the count and then writing it plus one, overlap: the second waits for
    the first's commit, then reads its count, instead of failing with "database is locked" when it upgrades a read
    transaction the first has overtaken (and neither increment is lost)."""
    other = open_database(settings, upgrade=False)  # another process: its own connections and writers' queue
    began, read = threading.Event(), threading.Event()

    def seen(connection, cursor, statement, *_):
        (began if statement.startswith("BEGIN") else read).set()

    event.listen(other.engine, "before_cursor_execute", seen)
    failures: list[BaseException] = []

    def second() -> None:
        try:
            with other.write() as session:
                count = _count(session, counter)
                session.execute(update(Lease).where(Lease.name == counter).values(token=count + 1))
        except BaseException as exc:  # noqa: BLE001 - the test asserts there was none
            failures.append(exc)

    try:
        with db.write() as session:
            count = _count(session, counter)
            thread = threading.Thread(target=second)
            thread.start()
            assert began.wait(10)
            # a deferred BEGIN lets the second read now (and fail later); an immediate one holds it before its read
            read.wait(1)
            session.execute(update(Lease).where(Lease.name == counter).values(token=count + 1))
        thread.join(30)
    finally:
        other.dispose()
    assert failures == []
    with db.read() as session:
        assert _count(session, counter) == 2


def test_a_read_sees_one_committed_state_while_another_connection_commits(db, counter):
    with db.read() as session:
        before = _count(session, counter)
        with db.write() as writer:  # another connection commits between the read's two SELECTs
            writer.execute(update(Lease).where(Lease.name == counter).values(token=Lease.token + 1))
        assert _count(session, counter) == before == 0
    with db.read() as session:
        assert _count(session, counter) == 1


def test_a_write_that_raises_leaves_nothing(db, counter):
    with pytest.raises(RuntimeError):
        with db.write() as session:
            session.execute(update(Lease).where(Lease.name == counter).values(token=7))
            session.add(Lease(name="written-then-raised", token=1, expires_at=NOW))
            session.flush()
            raise RuntimeError("the unit of work fails half-way")
    with db.read() as session:
        assert session.scalars(select(Lease.name)).all() == [counter]
        assert _count(session, counter) == 0


def test_a_fenced_write_after_the_lease_is_revoked_raises_and_writes_nothing(db, counter):
    with db.write() as session:
        session.add(Lease(name=LEADER, holder="this-replica", token=1, expires_at=NOW))
    fence = Fence({LEADER: 1})
    loops = fenced(db, fence)
    with loops.write() as session:  # while the lease is held, the fenced write commits
        session.execute(update(Lease).where(Lease.name == counter).values(token=1))
    fence.revoke()
    with pytest.raises(Fenced):
        with loops.write() as session:
            session.execute(update(Lease).where(Lease.name == counter).values(token=2))
    with db.read() as session:
        assert _count(session, counter) == 1


class _CountedWaits(threading.Condition):
    """A line of the SQLite writers' queue that counts each wait: the test knows who is queued, without sleeping."""

    def __init__(self, lock, queued: threading.Semaphore) -> None:
        super().__init__(lock)
        self.queued = queued

    def wait(self, timeout=None):
        self.queued.release()
        return super().wait(timeout)


def _queue_in_order(db, holder, waiters) -> list[str]:
    """`holder` (a database) writes and holds SQLite's write lock while `waiters` ((name, database) pairs) queue one
    after the other; then it commits. Returns the order in which the waiters wrote."""
    queued = threading.Semaphore(0)
    queue = db.writers
    queue._lines = {line: _CountedWaits(queue._mutex, queued) for line in queue._lines}
    holding, release, order = threading.Event(), threading.Event(), []

    def hold() -> None:
        with holder.write() as session:
            session.execute(update(Lease).where(Lease.name == "counter").values(token=Lease.token + 1))
            holding.set()
            assert release.wait(30)

    def write(name: str, database) -> None:
        with database.write() as session:
            order.append(name)
            session.execute(update(Lease).where(Lease.name == "counter").values(token=Lease.token + 1))

    threads = [threading.Thread(target=hold)]
    threads[0].start()
    assert holding.wait(30)
    for name, database in waiters:
        threads.append(threading.Thread(target=write, args=(name, database)))
        threads[-1].start()
        assert queued.acquire(timeout=30)  # it waits in its line before the next one comes
    release.set()
    for thread in threads:
        thread.join(30)
    with db.read() as session:
        assert _count(session, "counter") == 1 + len(waiters)  # every write committed, none twice
    return order


def _loops_of(db):
    with db.write() as session:
        session.add(Lease(name=LEADER, holder="this-replica", token=1, expires_at=NOW))
    return fenced(db, Fence({LEADER: 1}))


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_an_api_write_on_sqlite_goes_before_the_loop_writes_queued_before_it(db, counter):
    """A submission waits for the one loop transaction under way, not for the watch events and dispatcher batches
    queued before it."""
    loops = _loops_of(db)
    order = _queue_in_order(db, loops, [(f"loop-{i}", loops) for i in range(4)] + [("api", db)])
    assert order == ["api", "loop-0", "loop-1", "loop-2", "loop-3"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_api_writes_on_sqlite_leave_every_other_turn_to_the_loops(db, counter):
    """A stream of submissions does not hold the scheduler's commit back: after an API write, a waiting loop
    write goes next."""
    loops = _loops_of(db)
    order = _queue_in_order(db, db, [(f"api-{i}", db) for i in range(3)] + [("loop", loops), ("loop-2", loops)])
    assert order == ["loop", "api-0", "loop-2", "api-1", "api-2"]


@pytest.mark.parametrize(("items", "seconds", "next_size"), [
    pytest.param(40, 0.1, 20, id="twice-the-budget-half-as-many"),
    pytest.param(40, 0.05, 40, id="on-budget-as-many"),
    pytest.param(40, 0.01, 80, id="fast-at-most-twice-as-many"),
    pytest.param(80, 0.001, 100, id="never-above-most"),
    pytest.param(40, 0.0, 80, id="unmeasurable-twice-as-many"),
    pytest.param(1, 3.0, 1, id="never-fewer-than-one"),
])
def test_write_slices_hold_the_write_lock_about_their_budget(items, seconds, next_size):
    slices = WriteSlices(most=100, budget=0.05, size=items)
    slices.took(items, seconds)
    assert slices.size == next_size


def test_write_slices_start_small_and_never_above_most():
    assert WriteSlices(most=200).size == 10
    assert WriteSlices(most=2).size == 2


def test_write_slices_size_the_next_slice_by_the_block_they_time():
    slices = WriteSlices(most=100, budget=0.01, size=40)
    with slices.timed(40):
        time.sleep(0.02)  # at least twice the budget: at most half as many next
    assert slices.size <= 20


@pytest.mark.parametrize(("seconds", "taken"), [
    pytest.param(0.035, [0, 1, 2, 3], id="until-the-time-is-up"),
    pytest.param(1.0, list(range(6)), id="all-when-there-is-time"),
    pytest.param(0.0, [0], id="always-the-first"),
])
def test_within_takes_items_until_its_time_is_up(seconds, taken):
    """The clock moves 10 ms a read: read once to set the deadline (at 10 ms), then before each item after the first
    (the fourth item is taken at 40 ms, before the 45 ms deadline; the fifth would be at 50)."""
    assert list(within(range(6), seconds, clock=ticking(0.01))) == taken


def test_items_are_recorded_in_turns_each_taking_twice_what_the_last_had_time_for(db, monkeypatch):
    """Here each item takes longer than a turn may last: every transaction records one, and locks the rows of two
    after the first (of `most`), and each committed item is handed on once, in order."""
    monkeypatch.setattr(runtime, "within", partial(within, clock=ticking(WRITE_BUDGET)))
    locked, recorded, committed = [], [], []
    record_in_turns(db, list(range(5)), most=4, lock=lambda session, batch: locked.append(list(batch)),
                    record=lambda session, item: recorded.append(item), committed=committed.append)
    assert locked == [[0, 1, 2, 3], [1, 2], [2, 3], [3, 4], [4]]
    assert recorded == [0, 1, 2, 3, 4]
    assert committed == [[0], [1], [2], [3], [4]]
