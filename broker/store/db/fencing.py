"""Fencing: the commits of a replica's loop services check, in their own transaction (`Database.write`), that the
replica still holds the lease they were started under, so that a paused ex-leader can never write after a takeover."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.store.db.models import Lease
from broker.store.db.runtime import Database


class Fenced(Exception):
    """A loop service's commit or member call refused: its replica lost the lease it was started under."""


class Fence:
    """The leases (name → fencing token) a replica's loop services were started under, and whether the replica may
    still act on them."""

    def __init__(self, tokens: dict[str, int], valid: Callable[[], bool] = lambda: True, *,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.tokens = tokens  # replaced whole (never changed in place) when a lane moves to other members
        self._valid, self._clock, self._sleep = valid, clock, sleep
        self._revoked = threading.Event()
        self._not_before = float("-inf")  # no member call before (this replica's monotonic clock)

    def hold_off(self, until: float) -> None:
        """No member call before `until`: leases taken over from a replica that stopped renewing them, whose last
        calls (started a member timeout before its leases could expire) may still be landing."""
        self._not_before = max(self._not_before, until)

    def revoke(self) -> None:
        """A lease is lost: refuse from now on without asking the database."""
        self._revoked.set()

    def ensure_valid(self) -> None:
        """Before acting on a member (which no token guards): wait out a hold-off, then raise if a lease may be lost
        or renewals lapsed."""
        wait = self._not_before - self._clock()
        if wait > 0:
            self._sleep(wait)
        if self._revoked.is_set() or not self._valid():
            raise Fenced(f"this replica no longer surely holds {_names(self.tokens)}")

    def check(self, session: Session) -> None:
        """In the transaction about to commit: the lease rows still carry our tokens. On PostgreSQL the rows are
        share-locked until the commit, so a takeover (an UPDATE of a row) waits for it or comes first and makes
        this check fail; on SQLite the transaction already holds the database's only write lock. The token decides,
        not the renewals' clock: a transaction that outlasts the renewals (the scheduler's first commit over a large
        backlog; on SQLite this process's own renewal waits for that commit's write lock) is not refused for a lease
        that no one could take while it ran."""
        tokens = self.tokens
        if self._revoked.is_set():
            raise Fenced(f"this replica lost {_names(tokens)}")
        # in name order, as the renewals lock them (broker.services.lanes): two orders could deadlock
        current = dict(session.execute(select(Lease.name, Lease.token).where(Lease.name.in_(list(tokens)))
                                       .order_by(Lease.name).with_for_update(read=True)).all())
        if current != tokens:
            self.revoke()
            taken = sorted(name for name, token in tokens.items() if current.get(name) != token)
            raise Fenced(f"{_names(taken)} taken over by another replica; commit refused")


def _names(leases) -> str:
    names = sorted(leases)
    return f"the {', '.join(names[:5])}{'…' if len(names) > 5 else ''} lease{'s' if len(names) > 1 else ''}"


def fenced(database: Database, fence: Fence) -> Database:
    """The same database, whose writes check `fence` before they commit; for one replica's loop services."""
    return replace(database, fence=fence)
