"""The loop services a broker process runs; each joins the pure core to the database and the members.

The API reaches them only through what `__all__` names: a replica's start (`replica`, `serving_heap`), a new
member's first sync, and a pull member's agent's work and reports, recorded as the loops record their own.
"""

from __future__ import annotations

import gc
import sys

from broker.process.settings import Settings
from broker.services.dispatcher import DispatcherService
from broker.services.forecast import ForecastService
from broker.services.inventory import ClusterHealthService, InventorySyncService, first_sync, flush
from broker.services.mirror import reported_mirror
from broker.services.lanes import MemberLeases, member_lanes
from broker.services.lease import LeaseRecord, leader, replica_name
from broker.services.loop import LoopService
from broker.services.members import MemberClients
from broker.services.outcomes import assigned_work, reported_outcomes
from broker.services.retention import RetentionService
from broker.services.scheduler import SchedulerService
from broker.services.status import StatusService, record_listed
from broker.services.wakeups import Wakeups
from broker.store.db.runtime import Database

__all__ = ["assigned_work", "first_sync", "flush", "record_listed", "replica", "reported_mirror", "reported_outcomes",
           "serving_heap"]

# `serve` without --workers: the API answers from the process whose loops schedule (bench/leader_api.py). A request
# waits for the GIL after each SQL statement and each trip through the thread pool; while the scheduler computes it
# got it back only after the default switch interval of 5 ms each time.
API_SWITCH_INTERVAL = 0.001
# Young collections every 10,000 net allocations instead of 700: fewer of a cycle's short-lived objects reach the old
# generation, whose collections pause every request (0.1-1 s each over a 100,000 backlog). Measured: 106 full
# collections in the bench's 4 minutes with the default thresholds, 15 with (10,000, 10, 10); the same RSS. And a full
# collection only every 100 middle ones: a cycle over 100,000 parked jobs makes a verdict for each (~500,000 objects
# that live one cycle), which brought one every ~5 s in steady state, 0.2-0.5 s each; one a minute with 100.
GC_THRESHOLDS = (10_000, 10, 100)


def beside_the_api() -> None:
    """Tune this interpreter for loop services that share it with the API."""
    sys.setswitchinterval(API_SWITCH_INTERVAL)
    serving_heap()


def serving_heap() -> None:
    """For a process that serves requests, once started: the collector's thresholds above, and what start-up built
    (modules, settings: some 240,000 objects, never garbage) kept out of its full collections, each of which walked
    it all (0.25 s on a loaded machine) while every request waited."""
    gc.set_threshold(*GC_THRESHOLDS)
    gc.freeze()


def build_services(database: Database, settings: Settings) -> list[LoopService]:
    """Every loop service, on every member: one process that runs them all (SQLite, and the tests)."""
    members = MemberClients(settings, guard=database.ensure_leading)
    return [InventorySyncService(database, settings, members), ClusterHealthService(database, settings, members),
            SchedulerService(database, settings), DispatcherService(database, settings, members),
            StatusService(database, settings, members), RetentionService(database, settings),
            ForecastService(database, settings)]


def leader_services(database: Database, settings: Settings) -> list[LoopService]:
    """What one replica at a time runs when the member work is shared: placement, health, fail-over, retention,
    the forecast."""
    members = MemberClients(settings, guard=database.ensure_leading)
    return [ClusterHealthService(database, settings, members), SchedulerService(database, settings),
            DispatcherService(database, settings, members, lane=frozenset()), RetentionService(database, settings),
            ForecastService(database, settings)]


def lane_services(database: Database, settings: Settings, lane: frozenset[int]) -> list[LoopService]:
    """What a replica runs on the members whose leases it holds: their inventory, status and dispatch."""
    members = MemberClients(settings, guard=database.ensure_leading)
    return [InventorySyncService(database, settings, members, lane=lane),
            StatusService(database, settings, members, lane=lane),
            DispatcherService(database, settings, members, lane=lane, fails_over=False)]


def replica(database: Database, settings: Settings, *, run_loops: bool) -> Wakeups:
    """What one replica runs beside its API: the wake-ups and, if it runs loops at all (ARCHIPELAGO_RUN_LOOPS), the
    loop services under the leader lease and, on PostgreSQL, its lanes of the members under their leases."""
    wakeups = Wakeups(database)
    if run_loops:
        holder = replica_name()
        lease = LeaseRecord(database, holder=holder, duration=settings.lease_duration)
        if settings.is_sqlite:  # one process runs everything
            wakeups.loops.append(leader(lease, settings, lambda fenced, _: build_services(fenced, settings)))
        else:
            wakeups.loops += [
                leader(lease, settings, lambda fenced, _: leader_services(fenced, settings), wake=wakeups.wake),
                member_lanes(MemberLeases(database, settings, holder=holder),
                             lambda fenced, lane: lane_services(fenced, settings, lane), wake=wakeups.wake)]
    return wakeups
