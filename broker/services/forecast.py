"""The forecast loop: every waiting job's expected start, recomputed from a fresh snapshot every
ARCHIPELAGO_FORECAST_INTERVAL seconds (`broker.engine.forecast`), stored with the job for the API, the CLI and the
dashboard. It writes nothing the scheduler reads: a forecast lost or late changes no decision."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from broker.process.settings import Settings
from broker.services.loop import LoopService
from broker.store.db.models import utcnow
from broker.store.db.runtime import Database
from broker.store.fleet_forecast import FleetForecast
from broker.store.forecast import write_forecasts

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
        self.database, self.now = database, now
        self.fleet = FleetForecast(settings)
        self.forecast_ids: set[str] = set()  # the jobs whose forecast this loop wrote last: cleared once out of it

    def run_once(self) -> ForecastOutcome:
        now = self.now()
        played = self.fleet.play(self.database, now)
        assert played is not None  # it waits its turn
        written = write_forecasts(self.database, played.expected, played.runtimes, now,
                                  cleared=self.forecast_ids - played.expected.keys())
        self.forecast_ids = set(played.expected)
        log.debug("forecast: %d waiting jobs in %.3f s", len(played.expected), played.seconds)
        return ForecastOutcome(len(played.expected), written, played.seconds)
