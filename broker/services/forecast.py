"""The forecast loop: every waiting job's expected start, recomputed from a fresh snapshot every
ARCHIPELAGO_FORECAST_INTERVAL seconds (`broker.engine.forecast`), stored with the job for the API, the CLI and the
dashboard. It writes nothing the scheduler reads: a forecast lost or late changes no decision."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from broker.engine.forecast import Limits, expected_end, forecast
from broker.process.settings import Settings
from broker.services.loop import LoopService
from broker.store.db.models import utcnow
from broker.store.db.runtime import Database
from broker.store.forecast import learn, queue_defaults, runtime_facts, runtimes, write_forecasts
from broker.store.scheduling import KeptClusters, PendingJobs, engine_config, read_inventory

log = logging.getLogger("archipelago.forecast")


@dataclass(frozen=True, slots=True)
class ForecastOutcome:
    forecast: int  # waiting jobs given a forecast
    written: int  # rows written (cleared ones too)
    seconds: float  # the forecast's own time: the play forward, not the read or the write


class ForecastService(LoopService):
    name = "forecast"

    def __init__(self, database: Database, settings: Settings, *, now: Callable[[], datetime] = utcnow) -> None:
        super().__init__(settings.forecast_interval)
        self.database, self.settings, self.now = database, settings, now
        self.config = engine_config(settings)
        self.limits = Limits(horizon_s=settings.forecast_horizon, window=settings.forecast_window)
        self.forecast_ids: set[str] = set()  # the jobs whose forecast this loop wrote last: cleared once out of it
        # kept between runs as the scheduler keeps them: a run reads what changed, and parses no manifest twice
        self.pending = PendingJobs(settings.scheduler_resync_interval)
        self.clusters = KeptClusters(settings.scheduler_resync_interval)

    def run_once(self) -> ForecastOutcome:
        now = self.now()
        with self.database.read() as session:
            inventory = read_inventory(session, now=now.timestamp(), pending=self.pending, kept=self.clusters)
            running = list(inventory.inputs[3].values())
            pending = list(inventory.pending)
            facts = runtime_facts(session, [int(j.id) for j in pending] + [int(p.job_id) for p in running])
            taught, defaults = learn(session, now), queue_defaults(session)
        expected_runtimes = runtimes(facts, taught, defaults, self.settings.forecast_default_runtime)
        started: dict[str, float] = {}  # a running job's start: its first part's
        for placement in running:
            if placement.charged:
                started[placement.job_id] = min(started.get(placement.job_id, placement.started_at), placement.started_at)
        ends = {job_id: expected_end(start, expected_runtimes[job_id].seconds, inventory.snapshot.now)
                for job_id, start in started.items()}
        began = time.perf_counter()
        budget = began + self.settings.forecast_budget
        expected = forecast(inventory.snapshot, pending, running, ends,
                            {job_id: r.seconds for job_id, r in expected_runtimes.items()}, self.config, self.limits,
                            out_of_time=lambda: time.perf_counter() > budget)
        seconds = time.perf_counter() - began
        written = write_forecasts(self.database, expected, expected_runtimes, now,
                                  cleared=self.forecast_ids - expected.keys())
        self.forecast_ids = set(expected)
        log.debug("forecast: %d waiting jobs in %.3f s", len(expected), seconds)
        return ForecastOutcome(len(expected), written, seconds)
