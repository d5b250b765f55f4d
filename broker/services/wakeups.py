"""Wake-ups across replicas: `wake(name)` runs a loop service now, in whichever replica runs the loops.

On PostgreSQL a wake-up is a NOTIFY on one channel; every replica that runs loops LISTENs on it and hands the
name to its loops (the leader's, its member lanes), which pass it on to a service of that name while they run.
So a submission or a cancel through an API-only replica starts the leader's cycle at once instead of at its next
interval, and a capacity freed in one replica's lane wakes the scheduler in the leader's. On SQLite one process
runs everything: the wake-up goes straight to its loops.
"""

from __future__ import annotations

import logging
import threading

import psycopg
from sqlalchemy import event, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from broker.services.lease import LeaseHolder
from broker.services.members import backoff
from broker.store.db.runtime import Database

log = logging.getLogger("archipelago.wakeups")

CHANNEL = "archipelago_wake"  # the jobs table's trigger (migration 0014) names it too
NOTIFY = text("SELECT pg_notify(:channel, :name)")
POLL_SECONDS = 1.0  # how often the listener looks up from its connection to see whether it should stop


_WAKE_ON_COMMIT = "archipelago_wake_on_commit"  # session.info: the (wakeups, loop name) its commit wakes


@event.listens_for(Session, "after_commit")
def _wake_committed(session: Session) -> None:
    """One listener for every session: a listener added to each submission's session cost it 30 µs, ~2% of a POST
    on SQLite."""
    for wakeups, name in session.info.pop(_WAKE_ON_COMMIT, ()):
        wakeups._deliver(name)


class Wakeups:
    """The `wake(name)` the API and the loops call; `start()`/`stop()` run the replica's loops and their listener."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.loops: list[LeaseHolder] = []
        self.across_processes = database.engine.dialect.name == "postgresql"
        self.listening = threading.Event()  # set while the listener's LISTEN is in place (tests wait on it)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def wake(self, name: str) -> None:
        if not self.across_processes:
            self._deliver(name)
            return
        try:
            with self.database.write() as session:
                session.execute(NOTIFY, {"channel": CHANNEL, "name": name})
        except SQLAlchemyError as exc:  # what was committed is found by the loop's next interval instead
            log.warning("wake-up of %s not sent: %s", name, str(exc).splitlines()[0])

    def jobs_queued(self, session: Session) -> None:
        """The jobs this `Database.write` session inserts reach the scheduler once it commits: on PostgreSQL the
        jobs table's trigger NOTIFYs at that commit (and not at all if it rolls back), no round trip of ours
        (migration 0014); on SQLite the scheduler is woken once the session commits."""
        if not self.across_processes:
            session.info.setdefault(_WAKE_ON_COMMIT, []).append((self, "scheduler"))

    def _deliver(self, name: str) -> None:
        for loops in self.loops:
            try:
                loops.wake(name)
            except Exception:  # e.g. a runner stopped between its check and the wake: the listener must live on
                log.exception("wake-ups: waking %s failed", name)

    def start(self) -> None:
        for loops in self.loops:
            loops.start()
        if self.loops and self.across_processes:
            self._thread = threading.Thread(target=self._listen, name="wakeups", daemon=True)
            self._thread.start()

    def _listen(self) -> None:
        """LISTEN on a connection of its own (reconnecting with back-off); each NOTIFY wakes the named loop."""
        conninfo = self.database.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        failures = 0
        while not self._stopping.is_set():
            try:
                # keepalives: a connection dropped silently would otherwise look like "nothing notified" forever
                with psycopg.connect(conninfo, autocommit=True, connect_timeout=5, keepalives=1, keepalives_idle=10,
                                     keepalives_interval=5, keepalives_count=3) as connection:
                    connection.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    failures = 0
                    self._deliver("scheduler")  # what was notified while we were not listening
                    while not self._stopping.is_set():
                        for notification in connection.notifies(timeout=POLL_SECONDS):
                            self._deliver(notification.payload)
            except psycopg.Error as exc:
                self.listening.clear()
                failures += 1
                log.warning("wake-ups: listening failed (%d in a row): %s", failures, str(exc).splitlines()[0])
                self._stopping.wait(backoff(failures, 0.5, 30.0))

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        for loops in reversed(self.loops):
            loops.stop()
