"""The status loop: each member's JobSets of the broker, followed into placements and jobs.

Per member one watch on JobSets labelled `archipelago.io/job-id`: a list first (and again after a
410 Gone or a reconnect, so nothing that happened while the watch was down is missed), then every
event as it comes, handed to the service's recorder, which records the events waiting, of every
member, in short transactions (`StatusService.record`). An event received but not recorded
(a batch that failed, a process killed) is learned again from the list that restarts its member's watch.
A member whose API cannot watch is polled by list every ARCHIPELAGO_STATUS_POLL_INTERVAL.

`run_once()` starts the watches of members that have none (and stops those of members removed);
with `watch=False` — and for members that cannot watch — it lists each member once instead, which
is how the tests drive it one deterministic step at a time.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from sqlalchemy import select

from broker.process.metrics import MEMBER_ERRORS, STATUS_LAG_SECONDS
from broker.process.settings import Settings
from broker.services.loop import LoopService, WatchThread, in_lane
from broker.services.members import UNAVAILABLE_STATES, MemberClients, backoff
from broker.store.db.fencing import Fenced
from broker.store.db.models import Cluster, utcnow
from broker.store.db.runtime import Database, record_in_turns
from broker.store.outbox import Changes, lock_reported, record_list, record_status
from clusters import jobsets
from clusters.kubeconfig import KubeconfigError
from clusters.member import MemberClient, MemberError

log = logging.getLogger("archipelago.status")

CANNOT_WATCH = frozenset({400, 405, 406, 415, 501})  # the member's API does not serve watches

# Watch events recorded in one transaction, at most (fewer where they take longer: `record_in_turns`). A
# takeover brings thousands in its first minutes (every copy the new leader's first cycle placed starts); one
# transaction each, on SQLite they queued behind one another for the write lock, and the leader's first cycle
# waited minutes for its own turns (bench/leader_api.py).
EVENTS_PER_TRANSACTION = 100


def record_listed(database: Database, cluster_id: int, items: list[dict], version: str, now: Any) -> Changes:
    """A list of the broker's copies on a member (the status loop's, or a pull member's agent's): each one's
    status, and the copies gone since (those the list at `version` no longer shows)."""
    with database.write() as session:
        return record_list(session, cluster_id, items, version, now)


class StatusService(LoopService):
    name = "status"

    def __init__(self, database: Database, settings: Settings, clients: MemberClients, *, watch: bool = True,
                 now: Callable[[], Any] = utcnow, lane: frozenset[int] | None = None) -> None:
        super().__init__(max(settings.status_poll_interval, 0.1))
        self.database, self.settings, self.clients, self.now = database, settings, clients, now
        self.watch, self.lane = watch, lane  # lane: the members it follows (None: all)
        self._watches: dict[int, _StatusWatch] = {}
        self._polled: set[int] = set()  # members that answered a watch with "not served"
        self._pool = ThreadPoolExecutor(settings.member_workers, thread_name_prefix="status")
        self._events: queue.SimpleQueue[tuple[int, dict, float] | None] = queue.SimpleQueue()  # the watches' events
        self._recorder: threading.Thread | None = None
        self._starting = threading.Lock()  # guards `_recorder` and `_stopped`
        self._stopped = False

    def run_once(self) -> dict[str, int | str]:
        """Start missing watches; list the members that are polled. Returns, per member listed, the
        number of copies seen or the error."""
        with self.database.read() as session:
            rows = session.execute(in_lane(select(Cluster.id, Cluster.name, Cluster.state, Cluster.kubeconfig_encrypted,
                                                  Cluster.context).where(Cluster.mode == "push"), self.lane)).all()
        registered = {row.id for row in rows}
        for cluster_id in [i for i in self._watches if i not in registered]:
            self._watches.pop(cluster_id).stop()
        polled = []
        for row in rows:
            if row.state in UNAVAILABLE_STATES:
                continue
            if not self.watch or row.id in self._polled:
                polled.append(row)
            elif row.id not in self._watches or not self._watches[row.id].is_alive():
                self._watches[row.id] = _StatusWatch(self, row)
                self._watches[row.id].start()
        return dict(zip((row.name for row in polled), self._pool.map(self._poll, polled)))

    def _poll(self, row: Any) -> int | str:
        try:
            return self.resync(row.id, self.clients.get(row.id, row.kubeconfig_encrypted, row.context))[0]
        except (MemberError, KubeconfigError, ValueError) as exc:
            MEMBER_ERRORS.labels(row.name).inc()
            return str(exc)

    def resync(self, cluster_id: int, client: MemberClient) -> tuple[int, str]:
        """List the member's copies and record them all, and the ones gone; (count, resourceVersion)."""
        items, version = jobsets.list_owned(client, from_cache=True)
        record_listed(self.database, cluster_id, items, version, self.now()).wake(self.wake)
        return len(items), version

    def received(self, cluster_id: int, event: dict) -> None:
        """A watch event, for the recorder."""
        with self._starting:
            if self._stopped:
                return
            if self._recorder is None:
                self._recorder = threading.Thread(target=self._record_loop, name="status-recorder", daemon=True)
                self._recorder.start()
        self._events.put((cluster_id, event, time.monotonic()))

    def record(self, events: Sequence[tuple[int, dict, float]]) -> None:
        """Watch events — (cluster id, event, monotonic time received) each — up to EVENTS_PER_TRANSACTION a
        transaction (`record_in_turns`), their jobs locked first; each transaction's wake-ups follow its commit."""
        events = [(cluster_id, event["object"], event["type"] == "DELETED", received)
                  for cluster_id, event, received in events if event.get("type") in ("ADDED", "MODIFIED", "DELETED")]
        now, changes = self.now(), Changes()

        def committed(done: Sequence[tuple[int, dict, bool, float]]) -> None:
            nonlocal changes
            at = time.monotonic()
            for *_, received in done:
                STATUS_LAG_SECONDS.observe(at - received)
            changes.wake(self.wake)
            changes = Changes()

        record_in_turns(self.database, events, most=EVENTS_PER_TRANSACTION, committed=committed,
                        lock=lambda session, batch: lock_reported(session, [report[:3] for report in batch]),
                        record=lambda session, report: changes.add(
                            record_status(session, report[0], report[1], now, deleted=report[2])))

    def _record_loop(self) -> None:
        """Record the events waiting, up to EVENTS_PER_TRANSACTION at a time (`record`), until `stop`. The members of a
        batch that fails have their watches stopped: the next pass starts them again, with a list."""
        while (first := self._events.get()) is not None:
            batch = [first]
            while len(batch) < EVENTS_PER_TRANSACTION:
                try:
                    event = self._events.get_nowait()
                except queue.Empty:
                    break
                if event is None:
                    return
                batch.append(event)
            try:
                self.record(batch)
                continue
            except Fenced as exc:  # this replica no longer carries them: their watches end, as on a refused call
                log.debug("status: watch events refused (a batch of %d): %s", len(batch), exc)
            except Exception:
                log.exception("status: recording watch events failed (%d in the batch); their members are listed "
                              "again", len(batch))
            for cluster_id in {cluster_id for cluster_id, _, _ in batch}:
                watch = self._watches.get(cluster_id)
                if watch is not None:
                    watch.stop()

    def retarget(self, lane: frozenset[int]) -> list[threading.Thread]:
        with self._lock:  # the pass lock: no pass under way still holds the old lane's members
            self.lane = lane
            left = [self._watches.pop(i) for i in list(self._watches) if i not in lane]
            self._polled &= lane
        for watch in left:
            watch.stop()
        return left

    def cannot_watch(self, cluster_id: int) -> None:
        self._polled.add(cluster_id)

    def stop(self) -> None:
        for watch in self._watches.values():
            watch.stop()
        with self._starting:
            self._stopped = True
        self._events.put(None)
        if self._recorder is not None:
            self._recorder.join()
        self._pool.shutdown(wait=True, cancel_futures=True)


class _StatusWatch(WatchThread):
    """List, then watch, one member's copies; relist after 410 Gone or any break, backing off while it fails."""

    def __init__(self, service: StatusService, row: Any) -> None:
        super().__init__(f"status-{row.name}")
        self.service, self.row = service, row

    def follow(self) -> None:
        failures, version = 0, None
        while not self._stop_event.is_set():
            try:
                client = self.service.clients.get(self.row.id, self.row.kubeconfig_encrypted, self.row.context)
                if version is None:
                    _, version = self.service.resync(self.row.id, client)
                self._stream = jobsets.watch_owned(client, version)
                if self._stop_event.is_set():
                    return
                for event in self._stream:
                    version = ((event.get("object") or {}).get("metadata") or {}).get("resourceVersion") or version
                    self.service.received(self.row.id, event)
                failures = 0  # the server ended the stream: resume from the last version
            except MemberError as exc:
                if self._stop_event.is_set():
                    return
                if exc.status in CANNOT_WATCH:
                    log.info("status: %s cannot watch JobSets (%s); polling it", self.row.name, exc)
                    self.service.cannot_watch(self.row.id)
                    return
                MEMBER_ERRORS.labels(self.row.name).inc()
                failures += 1
                version = None  # relist on reconnect: events may have been missed
                log.info("status watch of %s: %s; relisting", self.row.name, exc)
                if exc.reason != "Gone":
                    self._stop_event.wait(backoff(failures, 0.5, 30.0))
            except (KubeconfigError, ValueError) as exc:
                failures += 1
                log.warning("status watch of %s: %s", self.row.name, exc)
                self._stop_event.wait(backoff(failures, 1.0, 60.0))
            except Fenced:  # not a hiccup: this replica no longer carries the member (WatchThread ends quietly)
                raise
            except Exception:  # a database hiccup: relist and go on rather than lose the member's watch
                log.exception("status watch of %s failed; relisting", self.row.name)
                failures, version = failures + 1, None
                self._stop_event.wait(backoff(failures, 1.0, 60.0))
            finally:
                self._stream = None
