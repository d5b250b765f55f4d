"""The leader lease: the loop services run in one replica at a time, and a replica that lost it commits nothing.

The `leases` row `leader` names its holder, until when it holds (`expires_at`) and a fencing token that grows
by one with every new holder. The holder renews it every ARCHIPELAGO_LEASE_RENEW_PERIOD; once it has gone
unrenewed for ARCHIPELAGO_LEASE_DURATION, any replica that runs loops takes it over (so within duration +
renew period of the holder's death). A replica runs its loop services only while it holds the lease and stops
them the moment it learns it lost it; each of their commits checks the token in its own transaction
(`broker.db.fencing`), so a paused ex-leader that wakes after a takeover has its commits refused. Expiry is
read on the replicas' clocks: skew between them delays or hastens a takeover, never lets two leaders write.
On SQLite the one process that runs loops holds it, through the same row.
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

from sqlalchemy import or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from broker.db.fencing import Fence, fenced
from broker.db.models import LEADER, Lease, utcnow
from broker.db.runtime import Database
from broker.metrics import LEASE_HELD, LEASES_LOST
from broker.services.dispatcher import writing
from broker.services.loop import LoopService, ServiceRunner
from broker.settings import Settings

log = logging.getLogger("archipelago.lease")

NEVER = datetime(1970, 1, 1, tzinfo=timezone.utc)


def replica_name() -> str:
    """Who holds a lease, as an operator reads it: host, process and a nonce (a restarted pid differs)."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


class LeaseRecord:
    """One named lease as one replica sees it: `hold()` renews it if ours, else takes it if free or expired."""

    def __init__(self, database: Database, *, holder: str, duration: float, name: str = LEADER,
                 now: Callable[[], datetime] = utcnow) -> None:
        self.database, self.holder, self.duration, self.name, self.now = database, holder, duration, name, now
        self.token: int | None = None  # the fencing token while held

    def hold(self) -> int | None:
        """Acquire or renew; the token held afterwards, or None (another replica holds it)."""
        now = self.now()
        lease = Lease.__table__
        expires = now + timedelta(seconds=self.duration)
        with writing(self.database) as session:
            dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
            session.execute(dialect.insert(lease).values(name=self.name, holder=None, token=0, expires_at=NEVER)
                            .on_conflict_do_nothing())
            this = lease.c.name == self.name
            if self.token is not None and session.execute(
                    update(lease).where(this, lease.c.holder == self.holder, lease.c.token == self.token)
                    .values(expires_at=expires)).rowcount:
                return self.token
            taken = session.execute(update(lease).where(this, or_(lease.c.holder.is_(None), lease.c.expires_at <= now))
                                    .values(holder=self.holder, token=lease.c.token + 1, expires_at=expires)).rowcount
            token = session.scalar(select(lease.c.token).where(this)) if taken else None
        self.token = token
        return token

    def release(self) -> None:
        """Give the lease up (a clean shutdown), so that another replica takes it at once."""
        if self.token is None:
            return
        lease = Lease.__table__
        with writing(self.database) as session:
            session.execute(update(lease).where(lease.c.name == self.name, lease.c.holder == self.holder,
                                                lease.c.token == self.token).values(holder=None, expires_at=self.now()))
        self.token = None


class Leader:
    """Holds the leader lease and runs the loop services while it does: started when it is acquired, stopped
    the moment it is lost or not renewed in time. `step()` is one renewal; `start()` repeats it in a thread."""

    def __init__(self, database: Database, settings: Settings, build: Callable[[Database], list[LoopService]], *,
                 now: Callable[[], datetime] = utcnow, clock: Callable[[], float] = time.monotonic) -> None:
        self.database, self.settings, self.build, self.clock = database, settings, build, clock
        self.lease = LeaseRecord(database, holder=replica_name(), duration=settings.lease_duration, now=now)
        self.runner: ServiceRunner | None = None
        self.fence: Fence | None = None
        # Until when this replica surely holds the lease: a renewal period short of when others may take it.
        self.valid_until = 0.0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one step (or stop) at a time

    @property
    def leading(self) -> bool:
        return self.runner is not None

    def step(self) -> bool:
        """Renew or acquire the lease; start or stop the loop services accordingly. Whether this replica leads."""
        with self._lock:
            started = self.clock()
            try:
                token = self.lease.hold()
            except SQLAlchemyError as exc:
                log.warning("lease: renewal failed: %s", str(exc).splitlines()[0])
                if self.leading and self.clock() >= self.valid_until:
                    self._lose("not renewed in time")
                return self.leading
            if token is None or (self.fence is not None and self.fence.token != token):
                if self.leading:
                    self._lose("taken over by another replica" if token is None else "expired and taken again")
                if token is None:
                    return False
            self.valid_until = started + self.settings.lease_duration - self.settings.lease_renew_period
            if not self.leading:
                self.fence = Fence(LEADER, token, lambda: self.clock() < self.valid_until)
                self.runner = ServiceRunner(self.build(fenced(self.database, self.fence)))
                self.runner.start()
                LEASE_HELD.set(1)
                log.info("lease: acquired by %s (fencing token %d); loop services started", self.lease.holder, token)
            return True

    def _lose(self, why: str) -> None:
        """Stop the loops now: the fence refuses their commits at once, the runner lets no new pass start."""
        self.fence.revoke()
        LEASE_HELD.set(0)
        LEASES_LOST.inc()
        log.warning("lease: lost (%s, fencing token %d); loop services stopped", why, self.fence.token)
        runner, self.runner, self.fence = self.runner, None, None
        runner.stop()

    def wake(self, name: str) -> None:
        runner = self.runner
        if runner is not None:
            runner.wake(name)

    def start(self) -> None:
        """One step now (a lone replica runs its loops from the start), then one every renew period."""
        self._safe_step()
        self._thread = threading.Thread(target=self._run, name="leader-lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(self.settings.lease_renew_period):
            self._safe_step()

    def _safe_step(self) -> None:
        try:
            self.step()
        except Exception:  # the thread must outlive any surprise; the next step tries again
            log.exception("lease: step failed")

    def stop(self) -> None:
        """Stop the loops, then give the lease up so that another replica takes over at once."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self.runner is not None:  # passes under way finish and commit: the lease is still ours
                self.runner.stop()
                self.runner, self.fence = None, None
                LEASE_HELD.set(0)
            try:
                self.lease.release()
            except SQLAlchemyError as exc:
                log.warning("lease: release failed (another replica takes it when it expires): %s",
                            str(exc).splitlines()[0])
