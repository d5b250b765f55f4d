"""The loop services one pass at a time, in the order work flows, on a clock that runs ahead of the wall
clock with the members' simulated time: how the tests and the benchmarks drive a whole broker against a
simulator whose time moves only when told (nothing waits on the wall clock)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Protocol

from broker.process.settings import Settings
from broker.services.dispatcher import DispatcherService
from broker.services.inventory import ClusterHealthService, InventorySyncService
from broker.services.members import MemberClients
from broker.services.scheduler import SchedulerService
from broker.services.status import StatusService
from broker.store.db.models import utcnow
from broker.store.db.runtime import Database


class SimulatedTime(Protocol):
    def advance(self, seconds: float) -> None: ...  # move the members' time; their controllers act on it

    def settle(self) -> None: ...  # let their controllers act on what was written, time standing still


class Stepper:
    """Every loop service of one broker, driven by `step`: no threads of their own, no watches."""

    def __init__(self, database: Database, settings: Settings, members: MemberClients, time: SimulatedTime) -> None:
        self.time, self.members = time, members
        self.elapsed = timedelta()  # the broker's clock runs ahead of the wall clock with the members'
        self.scheduler = SchedulerService(database, settings, now=self.now)
        self.dispatcher = DispatcherService(database, settings, members, now=self.now)
        self.status = StatusService(database, settings, members, watch=False, now=self.now)
        self.health = ClusterHealthService(database, settings, members, now=self.now)
        # every member resynced at each step (its clock says every sync is due): nodes and pods as they are
        self.inventory = InventorySyncService(database, settings, members, watch=False, clock=lambda: math.inf)

    def now(self) -> datetime:
        return utcnow() + self.elapsed

    def step(self, seconds: float = 0.0) -> None:
        """Time forward, then one pass of each loop in the order work flows (the inventory first: the
        scheduler sees the members' nodes and pods as they are)."""
        if seconds:
            self.time.advance(seconds)
            self.elapsed += timedelta(seconds=seconds)
        self.inventory.run_once()
        self.scheduler.run_once()
        self.dispatcher.run_once()
        self.time.settle()
        self.status.run_once()
        self.dispatcher.run_once()

    def close(self) -> None:
        for service in (self.dispatcher, self.status, self.health, self.inventory):
            service.stop()
        self.members.close()
