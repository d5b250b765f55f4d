"""The scheduler's courtesy to the API that shares its process: it steps aside while requests are being answered.

CPython runs one thread at a time. A scheduler computing over a 100,000 backlog and a request both want it, and they
took turns a switch interval each: a listing that costs 20 ms alone took 60 ms, and 200 ms at the 99th percentile,
whenever a cycle ran (bench/leader_api.py). At its pause points the scheduler now waits while a request is in
flight, so that the request runs alone; the wait is bounded and then the scheduler's turn is owed, so that a stream
of requests slows the cycles by half at worst and never stops them.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

# How long one pause waits for the requests in flight, and how long the pauser computes after it before it pauses
# again: under a constant stream of requests, cycles run at least half the time.
WAIT_AT_MOST = 0.025
OWED = 0.025


class RequestsFirst:
    """Requests in flight in this process, and pauses for those who defer to them."""

    def __init__(self, wait_at_most: float = WAIT_AT_MOST, owed: float = OWED,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.wait_at_most, self.owed, self.clock = wait_at_most, owed, clock
        self._in_flight = self._waiting = 0
        self._idle = threading.Condition()
        self._turn_until = threading.local()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        """Threads pausing now."""
        return self._waiting

    def started(self) -> None:
        with self._idle:
            self._in_flight += 1

    def answered(self) -> None:
        with self._idle:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.notify_all()

    def pause(self) -> None:
        """Wait while requests are in flight (at most `wait_at_most`), unless this thread's turn is owed."""
        if not self._in_flight or self.clock() < getattr(self._turn_until, "value", 0.0):
            return
        with self._idle:
            self._waiting += 1
            try:
                self._idle.wait_for(lambda: not self._in_flight, self.wait_at_most)
            finally:
                self._waiting -= 1
        self._turn_until.value = self.clock() + self.owed


# One per process: the interpreter lock that makes it needed is one per process too.
REQUESTS_FIRST = RequestsFirst()

