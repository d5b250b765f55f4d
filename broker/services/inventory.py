"""The loops that keep the inventory of every member right and fresh: sync (list, then watch) and health.

Each member has a `MemberMirror`: its nodes, the pods' holds and its HyperNodes as last listed or
watched. A resync (`InventorySyncService.run_once`, every ARCHIPELAGO_CLUSTER_SYNC_INTERVAL per
member) relists everything from the API server's watch cache while the member's watches are not all
open (the first sync, a watch that failed); between resyncs, and instead of them while every watch
holds, watches on nodes, pods and HyperNodes apply each change to the mirror and a flusher writes the
member's rows. Writes go through `write_inventory`,
which touches only rows that differ, so an unchanged member costs reads, not writes.

Members are synced and probed concurrently in a thread pool; each request has a short timeout and
a failing member backs off (exponentially, with jitter) on its own schedule, so a slow or dead
member never holds up the others.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from sqlalchemy import select

from broker.process.settings import Settings
from broker.services.loop import LoopService, WatchThread, in_lane
from broker.services.members import MemberClients, backoff
from broker.services.mirror import _LISTS, MemberMirror, relist, relist_all, served
from broker.store.db.fencing import Fenced
from broker.store.db.models import Cluster, as_utc, utcnow
from broker.store.db.runtime import Database
from broker.store.inventory import (FOR_CLUSTER_WRITE, WriteResult, cluster_to_change, discovery_of, record_probe,
                                    record_sync_error, write_inventory)
from clusters.kubeconfig import KubeconfigError
from clusters import topology_writeback as writeback
from clusters.member import MemberClient, MemberError

log = logging.getLogger("archipelago.inventory")

WATCH_SECONDS = 300


def flush(database: Database, settings: Settings, cluster_id: int, mirror: MemberMirror, *,
          first: bool = False) -> WriteResult | None:
    """Write the mirror's rows for one cluster (None if it was removed meanwhile). `first`: only if no sync has
    written it yet."""
    with database.write() as session:
        cluster = cluster_to_change(session, cluster_id)
        if cluster is None:
            return None
        if first and cluster.synced_at is not None:
            return WriteResult()
        inventory = mirror.inventory(discovery_of(session, cluster, settings.topology_tier_labels))
        mirror.write_back = cluster.topology_write_back
        result = write_inventory(session, cluster, inventory, utcnow())
        if cluster.last_error is not None and cluster.unreachable_since is None and \
                not cluster.last_error.startswith(WRITE_BACK_ERROR):
            cluster.last_error = None  # the sync that failed before works again (a write-back's is its own to clear)
        return result


def first_sync(database: Database, settings: Settings, cluster_id: int, client: MemberClient) -> WriteResult | None:
    """The inventory of a cluster just registered, before the API answers; none if a loop's sync wrote one first
    (it listed after the registration too, and its watches carry it on: this list may be the older)."""
    mirror = MemberMirror()
    relist_all(client, mirror)
    return flush(database, settings, cluster_id, mirror, first=True)


@dataclass
class _Member:
    mirror: MemberMirror
    due: float = 0.0
    failures: int = 0
    watches: list[_Watch] | None = None
    client: MemberClient | None = None  # as its last sync reached it
    write_back_error: str | None = None  # the last write-back's failure, the cluster's last_error until one works
    write_back_retry: float = 0.0  # no write-back before then (monotonic), after a failure


WRITE_BACK_ERROR = "topology write-back: "
WRITE_BACK_RETRY_S = 30.0
WRITE_BACK_AGAIN_S = 1.0


def write_back(database: Database, cluster_id: int, member: _Member) -> bool:
    """The cluster's discovered tree onto the member as HyperNode objects, where it opted in
    (`clusters.topology_writeback`); the broker's own objects deleted where it opted out, or its tree is the member's
    own. Only what differs from the member's objects, as the mirror has them, is written. A failure is the cluster's
    last_error (an event when it changes) until a write-back works. One an admin must fix (no CRD, a refusal) is not
    tried again for WRITE_BACK_RETRY_S, or each pod event would ask the member again; a passing one (a timeout, a
    busy member) is, at the next write; True then: the caller asks for one soon, as no event of the member may come."""
    if member.write_back_error is not None and time.monotonic() < member.write_back_retry:
        return False
    mirror = member.mirror
    with mirror.lock:
        if member.client is None or mirror.tree is None:
            return False
        topology, source = mirror.tree
        wanted = mirror.write_back and source.startswith("labels:")
        if wanted and not mirror.has_hypernodes:
            error = (f"{WRITE_BACK_ERROR}the member serves no HyperNode CRD (topology.volcano.sh/v1alpha1); "
                     "install Volcano's, or turn write-back off")
        else:
            error = None
            steps = writeback.plan(writeback.desired(topology, source.partition(":")[2]) if wanted else {},
                                   mirror.hypernodes)
    lasting = error is not None  # no CRD
    if error is None:
        try:
            if steps.create or steps.apply or steps.status or steps.delete:
                writeback.write_back(member.client, steps)
        except MemberError as exc:
            error = f"{WRITE_BACK_ERROR}{exc}"
            lasting = exc.reason in ("Forbidden", "Unauthorized", "NotFound", "BadResponse")
    if error is None and member.write_back_error is None:
        return False
    with database.write() as session:
        cluster = cluster_to_change(session, cluster_id)
        if cluster is None:
            return False
        if error is not None:
            record_sync_error(session, cluster, error)
            member.write_back_retry = time.monotonic() + (WRITE_BACK_RETRY_S if lasting else 0.0)
        elif cluster.last_error == member.write_back_error:
            cluster.last_error = None  # it works again
    member.write_back_error = error
    return error is not None and not lasting


def _kept_by_watches(client: MemberClient, member: _Member) -> bool:
    """Whether the member's watches keep its mirror, so that a resync need list nothing (as client-go's
    informers never relist while their watches hold): every watch open, and the member serving
    HyperNodes exactly when they are watched (one discovery request tells)."""
    if not member.watches or not all(watch.open and watch.is_alive() for watch in member.watches):
        return False
    mirror = member.mirror
    if mirror.dra_refused:  # relisted at each resync until the broker may read the devices: a grant is seen then
        return False
    return served(client) == (mirror.has_hypernodes, mirror.has_dra)


class InventorySyncService(LoopService):
    """Resync of each member on its own schedule; with `watch`, watches keep members fresh between, and
    a resync relists a member only while one of its watches is down."""

    name = "inventory-sync"

    def __init__(self, database: Database, settings: Settings, clients: MemberClients, *, watch: bool = True,
                 clock: Callable[[], float] = time.monotonic, lane: frozenset[int] | None = None) -> None:
        super().__init__(max(min(settings.cluster_sync_interval, 5.0), 0.5))
        self.database, self.settings, self.clients = database, settings, clients
        self.watch, self.clock, self.lane = watch, clock, lane  # lane: the members it syncs (None: all)
        self.members: dict[int, _Member] = {}
        self._pool = ThreadPoolExecutor(settings.member_workers, thread_name_prefix="inventory-sync")
        self._dirty: set[int] = set()
        self._wake = threading.Condition()
        self._stopping = False
        self._flusher: threading.Thread | None = None
        self._flushing = threading.Lock()  # held while the flusher writes a member

    def run_once(self) -> dict[str, WriteResult | str]:
        """Resync every member that is due; returns, per cluster synced, what changed or the error."""
        with self.database.read() as session:
            rows = session.execute(in_lane(select(Cluster.id, Cluster.name, Cluster.kubeconfig_encrypted,
                                                  Cluster.context).where(Cluster.mode == "push"), self.lane)).all()
        self._forget({row.id for row in rows})
        now = self.clock()
        due = [row for row in rows if self.members.setdefault(row.id, _Member(MemberMirror())).due <= now]
        return dict(zip((row.name for row in due), self._pool.map(self._sync, due)))

    def _sync(self, row) -> WriteResult | str:
        member = self.members[row.id]
        try:
            client = self.clients.get(row.id, row.kubeconfig_encrypted, row.context)
            if not _kept_by_watches(client, member):
                relist_all(client, member.mirror)
            result = flush(self.database, self.settings, row.id, member.mirror)
            member.client = client
            write_back(self.database, row.id, member)
        except (MemberError, KubeconfigError, ValueError) as exc:
            member.failures += 1
            member.due = self.clock() + backoff(member.failures, max(self.settings.cluster_sync_interval, 1.0))
            log.warning("inventory sync of %s failed (%d in a row): %s", row.name, member.failures, exc)
            with self.database.write() as session:
                cluster = cluster_to_change(session, row.id)
                if cluster is not None:
                    record_sync_error(session, cluster, f"sync: {exc}")
            return str(exc)
        member.failures = 0
        member.due = self.clock() + self.settings.cluster_sync_interval * random.uniform(0.9, 1.1)
        if self.watch and result is not None and (member.watches is None
                                                  or not all(watch.is_alive() for watch in member.watches)):
            # none yet, or one ended (refused while this replica's renewals lapsed): the mirror was just relisted
            for watch in member.watches or ():
                watch.stop()
            member.watches = [_Watch(self, row.id, row.name, client, member.mirror, kind)
                              for kind in MemberMirror.KINDS if member.mirror.serves(kind)]
            self._start_flusher()
            for watch in member.watches:
                watch.start()
        return result if result is not None else "removed"

    def _forget(self, registered: set[int]) -> list[_Watch]:
        """Stop following the members not in `registered`; their watches, stopped."""
        stopped = []
        for cluster_id in [i for i in self.members if i not in registered]:
            for watch in self.members.pop(cluster_id).watches or ():
                watch.stop()
                stopped.append(watch)
        self.clients.retain(registered)
        return stopped

    def retarget(self, lane: frozenset[int]) -> list[threading.Thread]:
        with self._lock:  # the pass lock: no pass under way still syncs a member left
            self.lane = lane
            left = self._forget(set(lane))
        with self._flushing:  # nor does the flusher still write one (it skips members forgotten)
            pass
        return left

    # watches and the flusher ------------------------------------------------------------------------
    def changed(self, cluster_id: int) -> None:
        with self._wake:
            self._dirty.add(cluster_id)
            self._wake.notify()

    def _start_flusher(self) -> None:
        with self._wake:
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_loop, name="inventory-flush", daemon=True)
                self._flusher.start()

    def _flush_loop(self) -> None:
        """Write the members whose mirror changed; changes that arrive meanwhile go in the next write."""
        while True:
            with self._wake:
                while not self._dirty and not self._stopping:
                    self._wake.wait()
                if self._stopping:
                    return
                dirty, self._dirty = self._dirty, set()
            for cluster_id in dirty:
                with self._flushing:
                    member = self.members.get(cluster_id)
                    if member is None:
                        continue
                    try:
                        flush(self.database, self.settings, cluster_id, member.mirror)
                        if write_back(self.database, cluster_id, member):  # a passing failure: again soon
                            again = threading.Timer(WRITE_BACK_AGAIN_S, self.changed, (cluster_id,))
                            again.daemon = True
                            again.start()
                    except Fenced as exc:  # the lease holder stops this service and says why, once
                        log.debug("inventory write of cluster %s refused: %s", cluster_id, exc)
                    except Exception:  # the next change or resync writes it again
                        log.exception("inventory write of cluster %s failed", cluster_id)

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        for member in self.members.values():
            for watch in member.watches or ():
                watch.stop()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.clients.close()


class _Watch(WatchThread):
    """Watches one kind on one member: resumes where it left off, relists when the server says the
    version is gone, and backs off with jitter while the member fails."""

    def __init__(self, service: InventorySyncService, cluster_id: int, cluster: str, client: MemberClient,
                 mirror: MemberMirror, kind: str) -> None:
        super().__init__(f"watch-{cluster}-{kind}")
        self.service, self.cluster_id, self.cluster, self.client = service, cluster_id, cluster, client
        self.mirror, self.kind = mirror, kind
        self.open = False  # a stream is being read (not between a failure and the next watch)

    def follow(self) -> None:
        failures = 0
        resource, field_selector = _LISTS[self.kind]
        while not self._stop_event.is_set():
            try:
                self._stream = self.client.watch(resource, self.mirror.resume.get(self.kind, ""),
                                                 field_selector=field_selector, timeout_seconds=WATCH_SECONDS)
                if self._stop_event.is_set():
                    return
                self.open = True
                for event in self._stream:
                    if self.mirror.apply(self.kind, event):
                        self.service.changed(self.cluster_id)
                failures = 0
            except MemberError as exc:
                self.open = False
                if self._stop_event.is_set():
                    return
                if exc.reason == "Gone":
                    try:
                        relist(self.client, self.mirror, self.kind)
                        self.service.changed(self.cluster_id)
                        continue
                    except MemberError as again:
                        exc = again
                failures += 1
                log.info("watch of %s on %s: %s; retrying", self.kind, self.cluster, exc)
                self._stop_event.wait(backoff(failures, 0.5, 30.0))
            finally:
                self._stream = None


class ClusterHealthService(LoopService):
    """Probes every push member (GET /version) each interval, and reads every pull member's last heartbeat;
    NotReady after the grace, Ready when it answers (or its agent calls in) again."""

    name = "cluster-health"

    def __init__(self, database: Database, settings: Settings, clients: MemberClients, *,
                 now: Callable[[], Any] = utcnow) -> None:
        super().__init__(max(settings.health_probe_interval, 0.1))
        self.database, self.settings, self.clients, self.now = database, settings, clients, now
        self._pool = ThreadPoolExecutor(settings.member_workers, thread_name_prefix="cluster-health")

    def _probe(self, row) -> tuple[str | None, str | None] | None:
        """A push member answers `GET /version` or not; a pull member's agent has called in recently or not
        (None: it has, and its heartbeat already said so)."""
        if row.mode == "pull":
            silent = (self.now() - as_utc(row.last_heartbeat or row.created_at)).total_seconds()
            if silent <= self.settings.not_ready_grace:
                return None
            return None, f"its agent has not called in for {silent:.0f}s"
        try:
            return self.clients.get(row.id, row.kubeconfig_encrypted, row.context).version(), None
        except (MemberError, KubeconfigError, ValueError) as exc:
            return None, str(exc)

    def run_once(self) -> dict[str, str]:
        """Probe all members at once, then record every outcome in one transaction; returns the states."""
        with self.database.read() as session:
            rows = session.execute(select(Cluster.id, Cluster.kubeconfig_encrypted, Cluster.context, Cluster.mode,
                                          Cluster.last_heartbeat, Cluster.created_at)).all()
        outcomes = {row.id: outcome for row, outcome in zip(rows, self._pool.map(self._probe, rows))
                    if outcome is not None}
        now = self.now()
        with self.database.write() as session:
            states = {}
            for cluster in session.scalars(select(Cluster).where(Cluster.id.in_(list(outcomes))).order_by(Cluster.id)
                                           .with_for_update(**FOR_CLUSTER_WRITE),
                                           execution_options={"populate_existing": True}):
                version, error = outcomes[cluster.id]
                record_probe(session, cluster, now=now, grace=self.settings.not_ready_grace,
                             version=version, error=error)
                states[cluster.name] = cluster.state
        return states

    def stop(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.clients.close()  # the leader's services have no inventory sync to close them (closing twice is harmless)
