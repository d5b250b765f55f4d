"""The retention loop: deletes history older than ARCHIPELAGO_RETENTION_DAYS (broker.store.retention), one bounded
transaction at a time, so that the scheduler and the API never wait long behind it."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Callable

from broker.process.settings import Settings
from broker.services.loop import LoopService
from broker.store.db.models import utcnow
from broker.store.db.runtime import Database
from broker.store.retention import Pruned, history_from, prune_batch

log = logging.getLogger("archipelago.retention")


class RetentionService(LoopService):
    name = "retention"

    def __init__(self, database: Database, settings: Settings, *, now: Callable[[], datetime] = utcnow) -> None:
        super().__init__(settings.retention_interval)
        self.database, self.now, self.retention_days = database, now, settings.retention_days

    def run_once(self) -> Pruned:
        """Batches until one is not full; returns what this pass deleted."""
        total = Pruned()
        before = history_from(self.now(), self.retention_days)
        while before is not None:
            with self.database.write() as session:
                pruned = prune_batch(session, before)
            total.jobs += pruned.jobs
            total.events += pruned.events
            total.audit += pruned.audit
            if not pruned.full:
                break
        if total.jobs or total.events or total.audit:
            log.info("retention: deleted %d finished jobs, %d events and %d audit records from before %s", total.jobs,
                     total.events, total.audit, before.isoformat())
        return total
