"""Fencing: the commits of a replica's loop services check, in their own transaction, that the replica still
holds the lease they were started under, so that a paused ex-leader can never write after a takeover."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Callable

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from broker.db.models import Lease
from broker.db.runtime import Database
from broker.db.session import make_sessionmaker


class Fenced(Exception):
    """A loop service's commit or member call refused: its replica lost the lease it was started under."""


class Fence:
    """The fencing token a replica's loop services were started with, and whether the replica may still act."""

    def __init__(self, lease: str, token: int, valid: Callable[[], bool] = lambda: True) -> None:
        self.lease, self.token = lease, token
        self._valid = valid
        self._revoked = threading.Event()

    def revoke(self) -> None:
        """The lease is lost: refuse from now on without asking the database."""
        self._revoked.set()

    def ensure_valid(self) -> None:
        """Before acting on a member (which no token guards): raise if the lease may be lost or renewals lapsed."""
        if self._revoked.is_set() or not self._valid():
            raise Fenced(f"this replica no longer surely holds the {self.lease!r} lease (token {self.token})")

    def check(self, session: Session) -> None:
        """In the transaction about to commit: the lease row still carries our token. On PostgreSQL the row
        is share-locked until the commit, so a takeover (an UPDATE of the row) waits for it or comes first and
        makes this check fail; on SQLite the transaction already holds the database's only write lock."""
        self.ensure_valid()
        current = session.scalar(select(Lease.token).where(Lease.name == self.lease).with_for_update(read=True))
        if current != self.token:
            self.revoke()
            raise Fenced(f"the {self.lease!r} lease was taken over (token {current}, this replica's {self.token}); "
                         "commit refused")


def fenced(database: Database, fence: Fence) -> Database:
    """The same database, whose sessions check `fence` before each commit; for one replica's loop services."""
    sessions = make_sessionmaker(database.engine)
    event.listen(sessions, "before_commit", fence.check)
    return replace(database, sessions=sessions, fence=fence)
