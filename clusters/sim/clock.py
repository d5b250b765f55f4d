"""Simulated time: `speed` simulated seconds per real second, plus manual `advance()`.

One clock serves every cluster of a process so that a test can move all of them at once.
A speed of 0 freezes time except for `advance()`, which makes tests fully deterministic.
"""

from __future__ import annotations

import threading
import time


class SimClock:
    def __init__(self, speed: float = 1.0, start: float | None = None) -> None:
        if speed < 0:
            raise ValueError("speed must be >= 0")
        self.speed = speed
        self._real0 = time.monotonic()
        self._sim0 = time.time() if start is None else start
        self._offset = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        """Simulated Unix time in seconds."""
        return self._sim0 + (time.monotonic() - self._real0) * self.speed + self._offset

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time only moves forward")
        with self._lock:
            self._offset += seconds

    def real_delay(self, sim_seconds: float) -> float | None:
        """Real seconds until `sim_seconds` of simulated time pass by themselves (None: never)."""
        if self.speed <= 0:
            return None
        return max(0.0, sim_seconds / self.speed)


def rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
