"""Loop services: each writes only `run_once()`; APScheduler runs them on an interval or on demand.

A service is tested by calling `run_once()` once against a real database, never by waiting for the loop.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from datetime import datetime, timezone
from typing import Callable

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import Select

from broker.store.db.fencing import Fenced
from broker.store.db.models import Cluster

log = logging.getLogger("archipelago.services")


def in_lane(query: Select, lane: frozenset[int] | None) -> Select:
    """A query over clusters narrowed to a replica's lane of members (None: every member)."""
    return query if lane is None else query.where(Cluster.id.in_(sorted(lane)))


class LoopService(ABC):
    name: str = "loop"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self.woken = False  # set by the runner's wake(); read between passes
        # Runs another service now (e.g. the dispatcher wakes the scheduler); the runner sets it.
        self.wake: Callable[[str], None] = lambda name: None

    @abstractmethod
    def run_once(self) -> None:
        """One pass: read, decide, commit. Must be safe to interrupt at any instant."""

    def stop(self) -> None:
        """Release what the service holds beyond one pass (threads, connections); called once at shutdown."""

    def retarget(self, lane: frozenset[int]) -> list[threading.Thread] | None:
        """Carry on with another lane of members, once the pass under way (if any) is over: the members kept keep
        their watches and state. Returns the threads stopped that were at work on members left, for the caller to
        join; None if this service cannot move (the caller restarts it)."""
        return None

    def run_guarded(self) -> None:
        """What the scheduler calls: one pass at a time, and a failed pass never stops the loop.

        A wake-up that arrives during a pass runs one more pass right after it (APScheduler would skip
        it, the pass being under way), since what woke us may have been committed after this pass read."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            while True:
                self.woken = False
                try:
                    self.run_once()
                except Fenced as exc:  # the lease holder stops this service and says why, once
                    log.debug("%s: pass refused: %s", self.name, exc)
                    return
                except Exception:
                    log.exception("%s: pass failed; retrying on the next interval", self.name)
                    return
                if not self.woken:
                    return
        finally:
            self._lock.release()


class ServiceRunner:
    """Runs loop services in background threads; `wake(name)` runs one now (e.g. a job was queued)."""

    def __init__(self, services: list[LoopService], *, wake: Callable[[str], None] | None = None) -> None:
        """`wake`: where the services' own wake-ups go (by default to this runner; across replicas, a NOTIFY)."""
        # Every pass would log twice at INFO; and a pass still running when its next one is due is
        # skipped by design (one pass at a time), which APScheduler reports as a warning.
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
        logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
        self.services = {s.name: s for s in services}
        for service in services:
            service.wake = wake or self.wake
        self._scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1,
                                                            "misfire_grace_time": None})

    def start(self) -> None:
        for service in self.services.values():
            self._scheduler.add_job(service.run_guarded, "interval", seconds=service.interval, id=service.name,
                                    next_run_time=datetime.now(timezone.utc))
        self._scheduler.start()

    def wake(self, name: str) -> None:
        if self._scheduler.running and name in self.services:
            self.services[name].woken = True  # a pass under way runs once more
            self._scheduler.modify_job(name, next_run_time=datetime.now(timezone.utc))

    def stop(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)
        for service in self.services.values():
            service.stop()


class WatchThread(threading.Thread, ABC):
    """A daemon thread that follows watch streams of a member until stopped; stopping also breaks
    the stream it is reading, so shutdown never waits for a watch to time out. A watch whose replica no longer
    holds its lease (`Fenced`: a commit or a member call refused) ends quietly: that is how a lane given up or a
    lease lost reaches it, and the lease holder says so once for the whole lane."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._stop_event = threading.Event()
        self._stream = None  # the clusters.member.WatchStream being read

    def run(self) -> None:
        try:
            self.follow()
        except Fenced as exc:
            log.debug("%s: ended: %s", self.name, exc)

    @abstractmethod
    def follow(self) -> None:
        """List and watch until stopped (each kind of watch says how)."""

    def stop(self) -> None:
        self._stop_event.set()
        stream = self._stream
        if stream is not None:
            stream.close()
