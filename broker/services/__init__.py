"""The loop services a broker process runs; each joins the pure core to the database and the members."""

from __future__ import annotations

from broker.db.runtime import Database
from broker.services.dispatcher import DispatcherService
from broker.services.inventory import ClusterHealthService, InventorySyncService, MemberClients
from broker.services.loop import LoopService
from broker.services.scheduler import SchedulerService
from broker.services.status import StatusService
from broker.settings import Settings


def build_services(database: Database, settings: Settings) -> list[LoopService]:
    members = MemberClients(settings)
    return [InventorySyncService(database, settings, members), ClusterHealthService(database, settings, members),
            SchedulerService(database, settings), DispatcherService(database, settings, members),
            StatusService(database, settings, members)]
