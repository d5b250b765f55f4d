"""Wake-ups across replicas: `wake(name)` runs a loop service now, in whichever replica runs the loops.

On PostgreSQL a wake-up is a NOTIFY on one channel; every replica that runs loops LISTENs on it and hands the
name to its `Leader`, which passes it on only while it holds the lease. So a submission or a cancel through an
API-only replica starts the leader's cycle at once instead of at its next interval. On SQLite one process runs
everything: the wake-up goes straight to its loops.
"""

from __future__ import annotations

import logging
import threading

import psycopg
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from broker.db.runtime import Database
from broker.services.inventory import backoff
from broker.services.lease import Leader

log = logging.getLogger("archipelago.wakeups")

CHANNEL = "archipelago_wake"
POLL_SECONDS = 1.0  # how often the listener looks up from its connection to see whether it should stop


class Wakeups:
    """The `wake(name)` the API and the loops call; `start()`/`stop()` run the listener of a replica with loops."""

    def __init__(self, database: Database, leader: Leader | None) -> None:
        self.database, self.leader = database, leader
        self.across_processes = database.engine.dialect.name == "postgresql"
        self.listening = threading.Event()  # set while the listener's LISTEN is in place (tests wait on it)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def wake(self, name: str) -> None:
        if not self.across_processes:
            if self.leader is not None:
                self.leader.wake(name)
            return
        try:
            with self.database.engine.connect() as connection:
                connection.execute(text("SELECT pg_notify(:channel, :name)"), {"channel": CHANNEL, "name": name})
                connection.commit()
        except SQLAlchemyError as exc:  # what was committed is found by the loop's next interval instead
            log.warning("wake-up of %s not sent: %s", name, str(exc).splitlines()[0])

    def start(self) -> None:
        if self.leader is not None:
            self.leader.start()
            if self.across_processes:
                self._thread = threading.Thread(target=self._listen, name="wakeups", daemon=True)
                self._thread.start()

    def _listen(self) -> None:
        """LISTEN on a connection of its own (reconnecting with back-off); each NOTIFY wakes the named loop."""
        conninfo = self.database.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        failures = 0
        while not self._stopping.is_set():
            try:
                with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as connection:
                    connection.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    failures = 0
                    self.leader.wake("scheduler")  # what was notified while we were not listening
                    while not self._stopping.is_set():
                        for notification in connection.notifies(timeout=POLL_SECONDS):
                            self.leader.wake(notification.payload)
            except psycopg.Error as exc:
                self.listening.clear()
                failures += 1
                log.warning("wake-ups: listening failed (%d in a row): %s", failures, str(exc).splitlines()[0])
                self._stopping.wait(backoff(failures, 0.5, 30.0))

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        if self.leader is not None:
            self.leader.stop()
