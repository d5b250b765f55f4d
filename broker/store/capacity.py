"""Capacity: what some cluster could ever hold, so that a submission no cluster could ever run is refused at once,
with placement's own filters, instead of waiting in its queue forever; cached, as submissions arrive by the hundred
per second and the inventory's shape changes slowly."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from sqlalchemy.orm import Session

from broker.engine.jobset import JobSpec
from broker.engine.placement import Config
from broker.engine.placement.feasibility import empty, never_fits
from broker.engine.placement.model import Cluster, no_pause
from broker.engine.placement.snapshot import ClusterIndex
from broker.process.courtesy import REQUESTS_FIRST, RequestsFirst
from broker.store.errors import Invalid
from broker.store.scheduling import KeptClusters, read_clusters
from clusters.rules.quantity import add_into

log = logging.getLogger("archipelago.jobs")


@dataclass(frozen=True)
class FederationCapacity:
    """Every registered cluster as it could be (broker.engine.placement.feasibility.empty): enough to refuse at
    once a job no cluster could ever run, with placement's own filters, instead of leaving it queued forever."""

    clusters: tuple[ClusterIndex, ...]

    @property
    def totals(self) -> dict[str, int]:
        """The whole federation's allocatable, per resource."""
        total: dict[str, int] = {}
        for index in self.clusters:
            for node in index.cluster.nodes:
                add_into(total, node.allocatable)
        return total

    def refusal(self, spec: JobSpec, config: Config) -> Invalid | None:
        """The 422 for a job that could never run, with a reason per cluster; None if some cluster could."""
        reasons = never_fits(self.clusters, spec, config)
        if not reasons:
            return None
        detail = "; ".join(f"{name}: {why}" for name, why in sorted(reasons.items()))
        return Invalid("spec.replicatedJobs", f"no registered cluster could ever run it ({detail})",
                       clusters=reasons)


class KnownClusters:
    """What one capacity read leaves the next: the clusters' nodes (`KeptClusters`: the next reads the nodes of only
    the clusters whose inventory changed) and each cluster's empty index, built again only for a changed cluster."""

    def __init__(self) -> None:
        self.clusters = KeptClusters()
        self.empty: dict[str, tuple[Cluster, ClusterIndex]] = {}
        self.lock = threading.Lock()  # a submission's read and the cache's thread may overlap


def federation_capacity(session: Session, known: KnownClusters | None = None,
                        pause: Callable[[], None] = no_pause) -> FederationCapacity:
    """`pause`: between clusters and every few nodes read (`read_clusters`), for a read no request waits on."""
    known = known or KnownClusters()
    with known.lock:
        clusters = read_clusters(session, known.clusters, pause)
        indexes = {}
        for cluster in clusters:
            kept = known.empty.get(cluster.name)
            if kept is None or kept[0] is not cluster:
                pause()
                kept = (cluster, empty(cluster))
            indexes[cluster.name] = kept
        known.empty = indexes
        return FederationCapacity(tuple(index for _, index in known.empty.values()))


class CapacityCache:
    """Submissions arrive by the hundred per second; the inventory's shape changes slowly. Past the TTL a submission
    still gets the cached capacity while a thread reads it again (`read`: a session): reading thousands of nodes
    costs a submission's time many times over, in the process that also schedules."""

    def __init__(self, read: Callable[[], AbstractContextManager[Session]], ttl: float = 5.0,
                 requests: RequestsFirst = REQUESTS_FIRST) -> None:
        self._read, self._ttl, self._value, self._at = read, ttl, None, 0.0
        self._requests = requests  # the thread's read steps aside for them while none waits on it (`_pause`)
        self._generation, self._refreshing = 0, False
        self._lock = threading.Lock()
        self._known = KnownClusters()

    def get(self, session: Session | None = None) -> FederationCapacity:
        """The capacity; read now if none is cached, in `session`, else in a read session of its own — never in a
        caller's write transaction: in the leader process the first submission's read held SQLite's write lock a
        second, and every loop's writes and the next submissions waited (bench/leader_api.py)."""
        with self._lock:
            if self._value is None:
                with nullcontext(session) if session is not None else self._read() as reading:
                    self._value, self._at = federation_capacity(reading, self._known), time.monotonic()
            elif time.monotonic() - self._at > self._ttl and not self._refreshing:
                self._refreshing = True
                threading.Thread(target=self._refresh, args=(self._generation,), name="capacity", daemon=True).start()
            return self._value

    def warm(self) -> None:
        """Read the capacity now, before the process serves, or the first submission reads it: a second at 8,000
        nodes (bench/leader_api.py), while every request beside it and the loops wait for the interpreter. A database
        that does not answer yet leaves it to that first submission."""
        try:
            self.get()
        except Exception:  # only a head start: whatever failed, the first submission reads it and says so
            log.exception("capacity not read at start (the first submission reads it)")

    def _pause(self, generation: int) -> None:
        """Step aside for the requests in flight, unless the capacity was forgotten since the thread started: the next
        submission then reads it itself, waiting for the thread's read to end (`KnownClusters.lock`)."""
        if generation == self._generation:
            self._requests.pause()

    def _refresh(self, generation: int) -> None:
        started, value = time.monotonic(), None
        try:
            with self._read() as session:
                value = federation_capacity(session, self._known, lambda: self._pause(generation))
        finally:
            with self._lock:
                self._refreshing = False
                if value is not None and generation == self._generation:  # not if forgotten since: maybe older
                    self._value, self._at = value, started

    def forget(self) -> None:
        """Read again at the next submission: a cluster was added, removed or relabelled (what it may
        refuse for); node changes from the inventory loop wait out the TTL."""
        with self._lock:
            self._value, self._generation = None, self._generation + 1
