"""The scheduler loop: one placement cycle per pass, on an interval and whenever something changes.

Whoever changes what placement depends on wakes it at once with `ServiceRunner.wake("scheduler")`:
a placement that finished or was deleted (capacity freed), a cluster that is Ready again, a queue or
quota edit; a submission with `Wakeups.jobs_queued` (on PostgreSQL the jobs table's trigger NOTIFYs).
The interval (ARCHIPELAGO_SCHEDULER_INTERVAL) catches everything else, e.g. members' capacity reported
by the inventory sync.

The pending jobs' rows stay in memory between cycles (`PendingJobs`): a cycle reads only the new ones, and
all of them every ARCHIPELAGO_SCHEDULER_RESYNC_INTERVAL seconds and after any cycle in doubt. So do the
clusters' nodes and the live placements (`KeptClusters`): a cycle reads the nodes of the clusters whose
inventory changed.
"""

from __future__ import annotations

import gc
import logging
import math
import time
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Callable, Iterator

from broker.engine.placement import schedule
from broker.process.courtesy import REQUESTS_FIRST
from broker.process.metrics import CYCLES_DROPPED, PLACEMENTS_PER_CYCLE, PLACEMENTS_TOTAL, SCHEDULER_CYCLE_SECONDS
from broker.process.settings import Settings
from broker.services.loop import LoopService
from broker.store.db.models import utcnow
from broker.store.db.runtime import Database
from broker.store.inventory.devices import count_new_shapes, has_uncounted_shapes
from broker.store.forecast import untrusted_tenants
from broker.store.scheduling import (CommitOutcome, Inventory, KeptClusters, PendingJobs, commit_cycle, engine_config,
                                     has_pending, read_inventory)

log = logging.getLogger("archipelago.scheduler")

# From this many pending jobs on, the rows a full read left are kept out of the garbage collector's full
# collections (`freeze_long_lived`).
LONG_LIVED_ROWS = 10_000
# Every this many freezes, the collector also looks through what the earlier ones froze: an hour at the default
# resync interval.
FULL_COLLECTION_EVERY = 12
TRUST_REREAD_S = 60.0  # how often the tenants whose declared runtimes ran over are read again


def freeze_long_lived(collect: bool) -> None:
    """Keep what is alive now out of the collector's full collections.

    A scheduler over 100,000 pending jobs holds millions of long-lived objects; every full collection walked them
    all, holding the GIL 1.2–1.6 s while the API in the same process waited (bench/leader_api.py). Freezing walks
    nothing. What it froze is freed as usual once it is garbage, unless it is in a reference cycle (some 100 objects
    a full read): `collect` frees those too, in one full collection that holds the GIL 0.4–0.8 s at 100,000 jobs —
    not at a new leader's first read, whose cycle the API's requests wait on already, but once every
    FULL_COLLECTION_EVERY."""
    if collect:
        gc.unfreeze()
        gc.collect()
    gc.freeze()


@contextmanager
def collector_off(off: bool) -> Iterator[None]:
    """The garbage collector off for the block if `off` (and it was on): for a cycle that reads, decides and keeps the
    whole backlog at once — a new leader's first, the next after a cycle in doubt, one every resync interval. Its
    millions of new objects live on, so the young and middle collections their allocations set off (20–130 ms each
    at 100,000 jobs, holding the GIL while the API's requests in the same process wait) would only walk them to
    promote them. Measured (bench/leader_api.py, one host, the same hour): API p99 during a new leader's first cycle
    242–298 ms for GET, 245–348 ms for POST (four runs), from 406–500 and 429–601 ms (two runs)."""
    if not off or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class SchedulerService(LoopService):
    name = "scheduler"

    def __init__(self, database: Database, settings: Settings, *, now: Callable[[], datetime] = utcnow) -> None:
        super().__init__(settings.scheduler_interval)
        self.database, self.now = database, now
        self.config = engine_config(settings)
        self.pause = REQUESTS_FIRST.pause  # the API in this process goes first (`broker.process.courtesy`)
        self.pending = PendingJobs(settings.scheduler_resync_interval, self.pause)
        self.clusters = KeptClusters(settings.scheduler_resync_interval)
        self.freezes = 0  # `freeze_long_lived` calls since its last collection
        self.trust_read_at = -math.inf  # when the tenants whose declarations ran over were read (`untrusted_tenants`)

    def read(self) -> Inventory:
        """This cycle's snapshot, with the pending rows kept since the last one brought up to date."""
        full_reads = self.pending.full_reads
        now = self.now()
        with self.database.read() as session:
            if now.timestamp() - self.trust_read_at >= TRUST_REREAD_S:
                self.config = replace(self.config, untrusted_tenants=untrusted_tenants(session, now))
                self.trust_read_at = now.timestamp()
            inventory = read_inventory(session, now=now.timestamp(), pending=self.pending, kept=self.clusters,
                                       pause=self.pause)
        if self.pending.full_reads != full_reads and len(self.pending.rows) >= LONG_LIVED_ROWS:
            self.freezes = (self.freezes + 1) % FULL_COLLECTION_EVERY
            freeze_long_lived(collect=not self.freezes)
        return inventory

    def run_once(self) -> CommitOutcome:
        """1. read one snapshot, 2. decide, 3. commit the decisions, a slice of jobs per transaction, 4. write the
        reasons that changed, a slice per transaction."""
        with self.database.read() as session:
            if not has_pending(session):
                return CommitOutcome()
            new_demands = has_uncounted_shapes(session)
        if new_demands:  # a device demand first made since the last cycle: count what every node holds of it first
            with self.database.write() as session:
                count_new_shapes(session)
        started, full_reads = time.perf_counter(), self.pending.full_reads
        with collector_off(self.pending.reads_all(self.now().timestamp())):  # the whole backlog comes in at once
            try:
                inventory = self.read()
                result = schedule(inventory.snapshot, inventory.pending, self.config,
                                  self.pending.still_parked(inventory), self.pause)
                outcome = commit_cycle(self.database, inventory, result)
            except BaseException:
                self.pending.forget()  # whatever was written or not, the next cycle reads it all
                self.clusters.forget()
                raise
            self.pending.committed(inventory, result, outcome)
            if len(self.pending.rows) >= LONG_LIVED_ROWS and self.pending.full_reads != full_reads:
                # what the cycle kept after its read froze the rows (their new reasons) frozen too, or the first young
                # collection would walk it all; a later `freeze_long_lived(collect=True)` looks through it again
                gc.freeze()
        SCHEDULER_CYCLE_SECONDS.observe(time.perf_counter() - started)
        PLACEMENTS_TOTAL.inc(outcome.placements)
        if outcome.stale:  # placements_last_cycle keeps the last cycle that ran
            CYCLES_DROPPED.inc()
            log.info("scheduler: another scheduler committed since this cycle's read; the decisions not yet committed "
                     "are dropped (the slices before admitted %d jobs: %d placements, %d preempted)",
                     len(outcome.admitted), outcome.placements, outcome.preempted)
            return outcome
        PLACEMENTS_PER_CYCLE.set(outcome.placements)
        if outcome.admitted or outcome.dropped or outcome.preempted:
            log.info("scheduler: admitted %d jobs (%d placements), preempted %d placements, %d placed elsewhere "
                     "or cancelled meanwhile", len(outcome.admitted), outcome.placements, outcome.preempted,
                     len(outcome.dropped))
        return outcome
