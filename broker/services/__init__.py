"""The loop services a broker process runs; each joins the pure core to the database and the members."""

from __future__ import annotations

from broker.db.runtime import Database
from broker.services.dispatcher import DispatcherService
from broker.services.inventory import ClusterHealthService, InventorySyncService, MemberClients
from broker.services.lease import Leader
from broker.services.loop import LoopService
from broker.services.retention import RetentionService
from broker.services.scheduler import SchedulerService
from broker.services.status import StatusService
from broker.services.wakeups import Wakeups
from broker.settings import Settings


def build_services(database: Database, settings: Settings) -> list[LoopService]:
    members = MemberClients(settings)
    return [InventorySyncService(database, settings, members), ClusterHealthService(database, settings, members),
            SchedulerService(database, settings), DispatcherService(database, settings, members),
            StatusService(database, settings, members), RetentionService(database, settings)]


def replica(database: Database, settings: Settings, *, run_loops: bool) -> Wakeups:
    """What one replica runs beside its API: the wake-ups, and the loop services under the leader lease if it
    runs loops at all (ARCHIPELAGO_RUN_LOOPS)."""
    return Wakeups(database, Leader(database, settings, lambda fenced: build_services(fenced, settings))
                   if run_loops else None)
