"""The loop services' courtesy to the API that shares their process: they step aside while requests are answered.

CPython runs one thread at a time. A scheduler computing over a 100,000 backlog and a request both want it, and they
took turns a switch interval each: a listing that costs 20 ms alone took 60 ms, and 200 ms at the 99th percentile,
whenever a cycle ran (bench/leader_api.py); the members' loops, sixteen threads each, made it worse in bursts. At
their pause points (between a cycle's steps, before each transaction and member call) the loops now wait while a
request is in flight, so that it runs alone. What they defer is bounded like a leaky bucket: each second the loops
spend deferring fills it, each second they run drains it, and while it holds `DEFER_AT_MOST` they defer no more. So
sparse requests run alone, and requests back to back, or one held open, slow the loops by half at most.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

# The most the loops defer before they run as long again (seconds).
DEFER_AT_MOST = 0.1


class RequestsFirst:
    """Requests in flight in this process, and pauses for the threads that defer to them."""

    def __init__(self, defer_at_most: float = DEFER_AT_MOST, clock: Callable[[], float] = time.monotonic) -> None:
        self.defer_at_most, self.clock = defer_at_most, clock
        self._in_flight = self._waiting = 0
        self._idle = threading.Condition()
        self._deferred = 0.0  # the bucket's level: seconds deferred, less the seconds run since
        self._since = clock()  # when the last deferral ended (the loops ran since), or began (while anyone waits)

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
        """Wait while requests are in flight, as long as the loops may still defer."""
        if not self._in_flight:
            return
        with self._idle:
            now = self.clock()
            if not self._waiting:  # the loops ran since the last deferral ended: the bucket drained as much
                self._deferred, self._since = max(0.0, self._deferred - (now - self._since)), now
            left = self.defer_at_most - self._deferred - (now - self._since)
            if left <= 0:
                return
            self._waiting += 1
            try:
                self._idle.wait_for(lambda: not self._in_flight, left)
            finally:
                self._waiting -= 1
                if not self._waiting:  # the deferral ends: it fills the bucket
                    now = self.clock()
                    self._deferred, self._since = self._deferred + (now - self._since), now


# One per process: the interpreter lock that makes it needed is one per process too.
REQUESTS_FIRST = RequestsFirst()
