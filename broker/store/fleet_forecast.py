"""The fleet played forward from a fresh read (`broker.engine.forecast.forecast`): what the forecast loop writes for
every waiting job, and what a dry run asks for a JobSet not submitted yet ("would start about 14:20 on h100-eu")."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Mapping

from broker.engine.forecast import Expected, Limits, Runtime, expected_end, forecast
from broker.engine.placement import PendingJob
from broker.process.settings import Settings
from broker.store.db.runtime import Database
from broker.store.forecast import RuntimeFacts, learn, queue_defaults, runtime_facts, runtimes
from broker.store.scheduling import KeptClusters, PendingJobs, engine_config, read_inventory


@dataclass(frozen=True, slots=True)
class Played:
    expected: Mapping[str, Expected]  # job id -> its expected start; the waiting jobs in the window
    runtimes: Mapping[str, Runtime]  # job id -> its expected runtime; waiting and running jobs
    seconds: float  # the play forward's own time, not the read


class FleetForecast:
    """Keeps the pending jobs and clusters between reads, as the scheduler does: a read takes what changed, and parses
    no manifest twice. One play at a time (the kept state is not shared between threads)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.config = engine_config(settings)
        self.limits = Limits(horizon_s=settings.forecast_horizon, window=settings.forecast_window)
        self.pending = PendingJobs(settings.scheduler_resync_interval)
        self.clusters = KeptClusters(settings.scheduler_resync_interval)
        self.lock = threading.Lock()

    def play(self, database: Database, now: datetime, also: tuple[PendingJob, RuntimeFacts] | None = None, *,
             wait: bool = True) -> Played | None:
        """Every waiting job's expected start, within `forecast_budget` seconds of play. `also`: a job not submitted
        (a dry run's), with what its runtime is made of, played as if it had been submitted `now`. `wait`: False to
        give up (None) while another play is under way — a dry run answers without its start rather than queue."""
        if not self.lock.acquire(blocking=wait):
            return None
        try:
            with database.read() as session:
                inventory = read_inventory(session, now=now.timestamp(), pending=self.pending, kept=self.clusters)
                running = list(inventory.inputs[3].values())
                pending = list(inventory.pending)
                facts = runtime_facts(session, [int(j.id) for j in pending] + [int(p.job_id) for p in running])
                taught, defaults = learn(session, now), queue_defaults(session)
            if also is not None:
                pending.append(also[0])
                facts[also[0].id] = also[1]
            expected_runtimes = runtimes(facts, taught, defaults, self.settings.forecast_default_runtime)
            started: dict[str, float] = {}  # a running job's start: its first part's
            for placement in running:
                if placement.charged:
                    started[placement.job_id] = min(started.get(placement.job_id, placement.started_at),
                                                    placement.started_at)
            ends = {job_id: expected_end(start, expected_runtimes[job_id].seconds, inventory.snapshot.now)
                    for job_id, start in started.items()}
            began = time.perf_counter()
            budget = began + self.settings.forecast_budget
            expected = forecast(inventory.snapshot, pending, running, ends,
                                {job_id: r.seconds for job_id, r in expected_runtimes.items()}, self.config,
                                self.limits, out_of_time=lambda: time.perf_counter() > budget)
            return Played(expected, expected_runtimes, time.perf_counter() - began)
        finally:
            self.lock.release()
