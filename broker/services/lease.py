"""The leader lease: the loop services run in one replica at a time, and a replica that lost it commits nothing.

The `leases` row `leader` names its holder, until when it holds (`expires_at`) and a fencing token that grows
by one with every new holder. The holder renews it every ARCHIPELAGO_LEASE_RENEW_PERIOD; once it has gone
unrenewed for ARCHIPELAGO_LEASE_DURATION, any replica that runs loops takes it over (so within duration +
renew period of the holder's death). A replica runs its loop services only while it holds the lease and stops
them the moment it learns it lost it; each of their commits checks the token in its own transaction
(`broker.store.db.fencing`), so a paused ex-leader that wakes after a takeover has its commits refused. Expiry is
set and compared on the database's clock on PostgreSQL (`database_now`), so skew between the replicas' clocks
moves no expiry; a replica's own cut-off for acting (`valid_until`) runs on its monotonic clock.
On SQLite the one process that runs loops holds it, through the same row. `LeaseHolder` runs loop services under
any set of leases: the leader's here, the member lanes' in `broker.services.lanes`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Callable

from prometheus_client import Counter, Gauge
from sqlalchemy import func, or_, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from broker.process.metrics import LEASE_HELD, LEASES_LOST
from broker.process.settings import Settings
from broker.services.loop import LoopService, ServiceRunner
from broker.store.db.fencing import Fence, fenced
from broker.store.db.models import LEADER, Lease, as_utc, utcnow
from broker.store.db.runtime import Database

log = logging.getLogger("archipelago.lease")

NEVER = datetime(1970, 1, 1, tzinfo=timezone.utc)


def replica_name() -> str:
    """Who holds a lease, as an operator reads it: host, process and a nonce (a restarted pid differs)."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


def bound_waits(session: Session, seconds: float) -> None:
    """On PostgreSQL, no statement of this transaction waits longer than `seconds` (for a lock or otherwise): a lease
    claim that cannot finish within its renew period is better failed, logged and tried again than left hanging,
    which would also hang the replica's shutdown."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text(f"SET LOCAL statement_timeout = {max(1, int(seconds * 1000))}"))


def database_now(session: Session, now: Callable[[], datetime] | None) -> datetime:
    """The time leases are set and compared by: the database's clock on PostgreSQL (one clock for every replica,
    whatever their skew), this process's on SQLite (one process); `now` when a test drives time."""
    if now is not None:
        return now()
    if session.get_bind().dialect.name == "postgresql":
        return as_utc(session.scalar(select(func.now())))
    return utcnow()


class LeaseRecord:
    """One named lease as one replica sees it: `hold()` renews it if ours, else takes it if free or expired."""

    def __init__(self, database: Database, *, holder: str, duration: float, name: str = LEADER,
                 now: Callable[[], datetime] | None = None) -> None:
        self.database, self.holder, self.duration, self.name, self.now = database, holder, duration, name, now
        self.token: int | None = None  # the fencing token while held
        self.inherited = False  # taken over, at the last hold, from a holder that stopped renewing it

    def hold(self) -> int | None:
        """Acquire or renew; the token held afterwards, or None (another replica holds it)."""
        lease = Lease.__table__
        with self.database.write() as session:
            bound_waits(session, self.duration / 3)
            now = database_now(session, self.now)
            expires = now + timedelta(seconds=self.duration)
            dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
            session.execute(dialect.insert(lease).values(name=self.name, holder=None, token=0, expires_at=NEVER)
                            .on_conflict_do_nothing())
            this = lease.c.name == self.name
            if self.token is not None and session.execute(
                    update(lease).where(this, lease.c.holder == self.holder, lease.c.token == self.token)
                    .values(expires_at=expires)).rowcount:
                return self.token
            before = session.scalar(select(lease.c.holder).where(this))
            taken = session.execute(update(lease).where(this, or_(lease.c.holder.is_(None), lease.c.expires_at <= now))
                                    .values(holder=self.holder, token=lease.c.token + 1, expires_at=expires)).rowcount
            self.inherited = bool(taken) and before not in (None, self.holder)
            token = session.scalar(select(lease.c.token).where(this)) if taken else None
        self.token = token
        return token

    def release(self) -> None:
        """Give the lease up (a clean shutdown), so that another replica takes it at once."""
        if self.token is None:
            return
        lease = Lease.__table__
        with self.database.write() as session:
            session.execute(update(lease).where(lease.c.name == self.name, lease.c.holder == self.holder,
                                                lease.c.token == self.token)
                            .values(holder=None, expires_at=database_now(session, self.now)))
        self.token = None


class LeaseHolder:
    """Runs loop services while this replica holds a set of leases. `claim()` renews or takes them and says what
    is held (lease name → fencing token); the services start when some are held, carry on with the new set when it
    changes (`move`; else they start again on it), and stop at once when it is lost or could not be renewed in time;
    every commit of theirs checks the tokens (`broker.store.db.fencing`). `step()` is one claim; `start()` repeats it
    every renew period in a thread; `stop()` stops the services, then gives the leases up (`release`) so that
    another replica takes them at once."""

    def __init__(self, what: str, database: Database, settings: Settings, claim: Callable[[], dict[str, int]],
                 release: Callable[[], None], build: Callable[[Database, dict[str, int]], list[LoopService]], *,
                 holder: str, held_gauge: Gauge, lost_counter: Counter | None = None,
                 move: Callable[[list[LoopService], dict[str, int]], bool] | None = None,
                 wake: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 inherited: Callable[[], set[str]] = set, sleep: Callable[[float], None] = time.sleep) -> None:
        """`move`: carries the running services over to a changed set of leases in place (whether it could); without
        it, or when it cannot, they are stopped and started again on the new set. `inherited`: the leases the last
        claim took over from a replica that stopped renewing them (their services hold off member calls a member
        timeout)."""
        self.what, self.database, self.settings, self.claim, self.release = what, database, settings, claim, release
        self.move = move
        self.build, self.holder, self.held_gauge, self.lost_counter = build, holder, held_gauge, lost_counter
        self.wake_via, self.clock, self.sleep, self.inherited = wake, clock, sleep, inherited
        self.held: dict[str, int] = {}  # what the running services were started under
        self.runner: ServiceRunner | None = None
        self.fence: Fence | None = None
        # Until when this replica calls members under them: a member timeout (at least a renew period) short of when
        # others may take them, so that its last call has ended by then.
        self.valid_until = 0.0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one step (or stop) at a time

    @property
    def running(self) -> bool:
        return self.runner is not None

    def step(self) -> bool:
        """Claim; start, restart or stop the services accordingly. Whether they run."""
        with self._lock:
            started = self.clock()
            try:
                held = self.claim()
            except SQLAlchemyError as exc:
                log.warning("%s: renewal failed: %s", self.what, str(exc).splitlines()[0])
                if self.running and self.clock() >= self.valid_until:
                    self._stop("not renewed in time")
                return self.running
            self.valid_until = started + self.settings.lease_duration - max(self.settings.lease_renew_period,
                                                                            self.settings.member_timeout)
            if held != self.held and not (self.running and held and self._moved(held)):
                if self.running:
                    self._stop(None if held else "taken over by another replica")
                if held:
                    self._start(held)
            return self.running

    def _moved(self, held: dict[str, int]) -> bool:
        """The services carried over to `held` in place. Their commits are fenced by the leases gained from now on,
        and by those given up until `move` has stopped every piece of work on them: those are left to expire, so no
        one else can take them meanwhile."""
        before = self.held
        if self.move is None or any(before[name] != held[name] for name in before.keys() & held.keys()):
            return False  # a lease kept under a new token was another replica's meanwhile: nothing carries over
        self.fence.tokens = {**before, **held}
        self._hold_off(self.fence, held.keys() - before.keys())
        if not self.move(list(self.runner.services.values()), held):
            return False
        self.fence.tokens, self.held = dict(held), held
        self.held_gauge.set(len(held))
        log.info("%s: %d taken, %d given up, %d kept; loop services carried on", self.what,
                 len(held.keys() - before.keys()), len(before.keys() - held.keys()), len(held.keys() & before.keys()))
        return True

    def _start(self, held: dict[str, int]) -> None:
        """Only services that started count as running: if building or starting them fails, nothing is recorded as
        held, so the next step tries again (instead of renewing leases under which nothing runs)."""
        fence = Fence(held, lambda: self.clock() < self.valid_until, clock=self.clock, sleep=self.sleep)
        self._hold_off(fence, held.keys())
        runner = ServiceRunner(self.build(fenced(self.database, fence), held), wake=self.wake_via)
        try:
            runner.start()
        except BaseException:
            fence.revoke()
            runner.stop()
            raise
        self.held, self.fence, self.runner = held, fence, runner
        self.held_gauge.set(len(held))
        log.info("%s: acquired by %s (%s); loop services started", self.what, self.holder, _tokens(held))

    def _hold_off(self, fence: Fence, gained) -> None:
        if set(gained) & self.inherited():
            fence.hold_off(self.clock() + self.settings.member_timeout)

    def _stop(self, lost: str | None) -> None:
        """Stop the services now (`lost`: why, unless the leases held only changed): the fence refuses their commits
        at once, the runner lets no new pass start."""
        self.fence.revoke()
        self.held_gauge.set(0)
        if lost is None:
            log.info("%s: the leases held changed (%s before); loop services restarted", self.what,
                     _tokens(self.held))
        else:
            if self.lost_counter is not None:
                self.lost_counter.inc()
            log.warning("%s: lost (%s; %s); loop services stopped", self.what, lost, _tokens(self.held))
        runner, self.runner, self.fence, self.held = self.runner, None, None, {}
        runner.stop()

    def wake(self, name: str) -> None:
        runner = self.runner
        if runner is not None:
            runner.wake(name)

    def start(self) -> None:
        """One step now (a lone replica runs its loops from the start), then one every renew period."""
        self._safe_step()
        self._thread = threading.Thread(target=self._run, name=self.what, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(self.settings.lease_renew_period):
            self._safe_step()

    def _safe_step(self) -> None:
        try:
            self.step()
        except Exception:  # the thread must outlive any surprise; the next step tries again
            log.exception("%s: step failed", self.what)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self.runner is not None:  # passes under way finish and commit: the leases are still ours
                self.runner.stop()
                self.runner, self.fence, self.held = None, None, {}
                self.held_gauge.set(0)
            try:
                self.release()
            except SQLAlchemyError as exc:
                log.warning("%s: release failed (the others take over when it expires): %s", self.what,
                            str(exc).splitlines()[0])


def _tokens(held: dict[str, int]) -> str:
    if len(held) == 1:
        return f"fencing token {next(iter(held.values()))}"
    return f"{len(held)} leases"


def leader(lease: LeaseRecord, settings: Settings, build: Callable[[Database, dict[str, int]], list[LoopService]], *,
           wake: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> LeaseHolder:
    """The loop services that run in one replica at a time, under the leader lease."""

    def claim() -> dict[str, int]:
        token = lease.hold()
        return {} if token is None else {lease.name: token}

    return LeaseHolder("lease", lease.database, settings, claim, lease.release, build, holder=lease.holder,
                       held_gauge=LEASE_HELD, lost_counter=LEASES_LOST, wake=wake, clock=clock,
                       inherited=lambda: {lease.name} if lease.inherited else set(), sleep=sleep)
