"""The loop services a broker process runs; each joins the pure core to the database and the members."""

from __future__ import annotations

from broker.db.runtime import Database
from broker.services.dispatcher import DispatcherService
from broker.services.inventory import ClusterHealthService, InventorySyncService
from broker.services.lanes import MemberLeases, member_lanes
from broker.services.lease import LeaseRecord, leader, replica_name
from broker.services.loop import LoopService
from broker.services.members import MemberClients
from broker.services.retention import RetentionService
from broker.services.scheduler import SchedulerService
from broker.services.status import StatusService
from broker.services.wakeups import Wakeups
from broker.settings import Settings


def build_services(database: Database, settings: Settings) -> list[LoopService]:
    """Every loop service, on every member: one process that runs them all (SQLite, and the tests)."""
    members = MemberClients(settings, guard=database.ensure_leading)
    return [InventorySyncService(database, settings, members), ClusterHealthService(database, settings, members),
            SchedulerService(database, settings), DispatcherService(database, settings, members),
            StatusService(database, settings, members), RetentionService(database, settings)]


def leader_services(database: Database, settings: Settings) -> list[LoopService]:
    """What one replica at a time runs when the member work is shared: placement, health, fail-over, retention."""
    members = MemberClients(settings, guard=database.ensure_leading)
    return [ClusterHealthService(database, settings, members), SchedulerService(database, settings),
            DispatcherService(database, settings, members, lane=frozenset()), RetentionService(database, settings)]


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
