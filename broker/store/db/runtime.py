"""The database a running process works on: settings → engine → migrated schema → sessions."""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence, TypeVar

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from broker.process.courtesy import REQUESTS_FIRST
from broker.process.settings import Settings
from broker.store.audit import record_change
from broker.store.db import migrate
from broker.store.db.session import WRITE_LOCK, check_connection, make_engine, make_sessionmaker

if TYPE_CHECKING:
    from broker.store.db.fencing import Fence

T = TypeVar("T")


class WriterQueue:
    """This process's SQLite writers, one at a time, in two lines that take turns: the loop services' (fenced)
    writes and everyone else's (the API's, the lease renewals'). Whenever the lock is released, a writer waiting in
    the other line goes next: a submission waits for the one loop transaction under way, not for every watch event
    and dispatcher batch queued before it (a plain lock lets whoever asks first, or the OS, decide), and a stream of
    submissions still leaves every other turn to the loops."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._lines = {line: threading.Condition(self._mutex) for line in (True, False)}  # loop: True
        self._waiting = {True: 0, False: 0}
        self._held = False
        self._next: bool | None = None  # the line whose turn it is (None: whoever asks)

    @contextmanager
    def turn(self, *, loop: bool) -> Iterator[None]:
        with self._mutex:
            self._waiting[loop] += 1
            try:
                while self._held or self._next not in (None, loop):
                    self._lines[loop].wait()
            except BaseException:  # interrupted (KeyboardInterrupt) while waiting: the turn it was given goes on
                self._waiting[loop] -= 1
                if not self._held and self._next == loop and not self._waiting[loop]:
                    self._hand_over(after=loop)
                raise
            self._waiting[loop] -= 1
            self._held, self._next = True, None
        try:
            yield
        finally:
            with self._mutex:
                self._held = False
                self._hand_over(after=loop)

    def _hand_over(self, *, after: bool) -> None:
        """The turn to the other line if anyone waits there, else to this one's next writer (or to whoever asks)."""
        for line in (not after, after):
            if self._waiting[line]:
                self._next = line
                self._lines[line].notify()
                return
        self._next = None


# About how long a loop transaction holds SQLite's write lock: a submission waits for the one under way.
WRITE_BUDGET = 0.05


def within(items: Iterable[T], seconds: float, clock: Callable[[], float] = time.perf_counter) -> Iterator[T]:
    """The items, one at a time, until `seconds` have passed since the call (the first is always taken)."""
    until = clock() + seconds

    def taken() -> Iterator[T]:
        for count, item in enumerate(items):
            if count and clock() >= until:
                return
            yield item
    return taken()


@dataclass
class WriteSlices:
    """How many items the next of a series of write transactions takes (the reasons a cycle writes, in one statement
    each; `record_in_turns` is for items recorded one by one), so that each holds SQLite's write lock about `budget`
    seconds: a submission waits for the loop transaction under way (`WriterQueue`). The items' cost is what the last
    transaction measured: on a slow host, or while the scheduler computes beside them (the GIL), fewer items take as
    long."""

    most: int
    budget: float = WRITE_BUDGET
    size: int = 10

    def __post_init__(self) -> None:
        self.size = min(self.size, self.most)

    def took(self, items: int, seconds: float) -> None:
        """The last transaction wrote `items` in `seconds`: at most twice as many next, never fewer than one."""
        fit = int(self.budget * items / seconds) if seconds > 0 else self.most
        self.size = max(1, min(self.most, 2 * items, fit))

    @contextmanager
    def timed(self, items: int) -> Iterator[None]:
        """Time the block that writes `items` (inside its transaction, not its wait for the lock): `took`."""
        began = time.perf_counter()
        yield
        self.took(items, time.perf_counter() - began)


@dataclass
class Database:
    """Every transaction goes through `read` or `write`; `sessions` is for tests that set rows up."""

    engine: Engine
    sessions: sessionmaker[Session]
    fence: Fence | None = None  # set for the loop services of a replica that holds the leader lease
    # SQLite takes one writer at a time: this process's writers queue here, where the next one starts the moment
    # the last commits, instead of in SQLite's busy handler, which sleeps (up to 100 ms a try) between attempts;
    # shared with the fenced copies the loop services write through
    writers: WriterQueue = field(default_factory=WriterQueue, repr=False, compare=False)
    _writing: threading.local = field(default_factory=threading.local, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        postgresql = self.engine.dialect.name == "postgresql"
        self._reading = self.engine.execution_options(isolation_level="REPEATABLE READ") if postgresql else self.engine
        self._write_lock = self.engine.execution_options(**{WRITE_LOCK: True})
        loop = self.fence is not None
        self._queue = nullcontext if postgresql else lambda: self.writers.turn(loop=loop)

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session whose SELECTs all see one committed state: REPEATABLE READ on PostgreSQL, a deferred BEGIN on
        SQLite (which never takes its write lock). Nothing is committed: it ends rolled back."""
        self._step_aside()
        with self.sessions(bind=self._reading) as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One unit of work: committed if the block returns (the block never commits itself), rolled back if it
        raises. On SQLite each of its transactions holds the write lock from its BEGIN (broker.store.db.session), in its
        turn in this process's `WriterQueue`; PostgreSQL locks rows as it goes. With a fence, the commit checks the
        fencing tokens in the same transaction (broker.store.db.fencing)."""
        self._step_aside()
        with self._queue(), self.sessions(bind=self._write_lock) as session:
            self._writing.depth = getattr(self._writing, "depth", 0) + 1
            try:
                yield session
                audited = record_change(session)  # a request's change and its audit record: one commit
                if self.fence is not None:
                    self.fence.check(session)
                session.commit()
                if audited is not None:
                    audited.written = True
            finally:
                self._writing.depth -= 1

    def dispose(self) -> None:
        self.engine.dispose()

    def ensure_leading(self) -> None:
        """Before a loop service acts on a member: raise `Fenced` if its replica may have lost the lease."""
        if self.fence is not None:
            self._step_aside()
            self.fence.ensure_valid()

    def _step_aside(self) -> None:
        """The loop services (a fenced database) wait for the requests in flight in this process before each
        transaction and each member call (`broker.process.courtesy`); not in a write transaction, whose lock a
        submission may be waiting for."""
        if self.fence is not None and not getattr(self._writing, "depth", 0):
            REQUESTS_FIRST.pause()


def write_in_slices(database: Database, items: Sequence[T], *, most: int,
                    write: Callable[[Session, Sequence[T]], object]) -> None:
    """`write` the items a slice per transaction, each slice sized (`WriteSlices`, at most `most`) to hold the write
    lock about WRITE_BUDGET: for items written a few statements a slice (for items recorded one by one,
    `record_in_turns`)."""
    slices, start = WriteSlices(most=most), 0
    while start < len(items):
        taken = items[start:start + slices.size]
        with database.write() as session, slices.timed(len(taken)):
            write(session, taken)
        start += len(taken)


def record_in_turns(database: Database, items: Sequence[T], *, most: int,
                    lock: Callable[[Session, Sequence[T]], object], record: Callable[[Session, T], object],
                    committed: Callable[[Sequence[T]], object] = lambda done: None, autoflush: bool = True) -> None:
    """Record the items one by one (`record`) in write transactions that each lock the rows of up to `most` of them
    first (`lock`) and stop taking them once they have held the write lock about half of WRITE_BUDGET (`within`; the
    commit's writes take about as long again), however slowly the GIL lets them run beside the scheduler — sized by
    count alone, the dispatcher's 91 outcomes held it 208 ms during a new leader's first cycle (bench/leader_api.py).
    `committed` gets those each transaction recorded, once committed; the next one takes at most twice as many."""
    size = most
    while items:
        batch = items[:size]
        recording = within(batch, WRITE_BUDGET / 2)  # from before the locks
        recorded = 0
        with database.write() as session:
            session.autoflush = autoflush
            lock(session, batch)
            for item in recording:
                record(session, item)
                recorded += 1
        committed(items[:recorded])
        items, size = items[recorded:], min(most, 2 * recorded)


def open_database(settings: Settings, *, upgrade: bool) -> Database:
    """Connect (failing with one line if unreachable) and, if asked, bring the schema to head."""
    if settings.sqlite_path is not None:
        settings.sqlite_path.resolve().parent.mkdir(parents=True, exist_ok=True)
        # readable by this user only: it holds token hashes and encrypted kubeconfigs (SQLite gives its
        # journal and WAL files the database file's mode)
        os.close(os.open(settings.sqlite_path, os.O_WRONLY | os.O_CREAT, 0o600))
    engine = make_engine(settings.database_url)
    check_connection(engine)
    if upgrade:
        migrate.upgrade(engine)
    return Database(engine, make_sessionmaker(engine))
