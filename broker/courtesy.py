"""The loop services' courtesy to the API that shares their process: they step aside while requests are answered.

CPython runs one thread at a time. A scheduler computing over a 100,000 backlog and a request both want it, and they
took turns a switch interval each: a listing that costs 20 ms alone took 60 ms, and 200 ms at the 99th percentile,
whenever a cycle ran (bench/leader_api.py); the members' loops, sixteen threads each, made it worse in bursts. At
their pause points (between a cycle's steps, before each transaction and member call) the loops now wait while a
request is in flight, so that it runs alone. A wait is bounded: when requests keep coming past it, the loops are
owed a turn as long, in which none of them pauses. So requests never slow the loops by more than half, and a
request that arrives in the loops' turn is slowed as before, no more.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

# How long the loops wait for the requests in flight before they take a turn as long.
WAIT_AT_MOST = 0.1


class RequestsFirst:
    """Requests in flight in this process, and pauses for the threads that defer to them."""

    def __init__(self, wait_at_most: float = WAIT_AT_MOST, clock: Callable[[], float] = time.monotonic) -> None:
        self.wait_at_most, self.clock = wait_at_most, clock
        self._in_flight = self._waiting = 0
        self._idle = threading.Condition()
        self._turn_until = float("-inf")  # the loops' turn: nobody pauses before then

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
        """Wait while requests are in flight, unless it is the loops' turn; at most `wait_at_most`, after which the
        loops' turn begins."""
        if not self._in_flight or self.clock() < self._turn_until:
            return
        with self._idle:
            self._waiting += 1
            try:
                answered = self._idle.wait_for(lambda: not self._in_flight or self.clock() < self._turn_until,
                                               self.wait_at_most)
            finally:
                self._waiting -= 1
            if not answered:
                self._turn_until = max(self._turn_until, self.clock() + self.wait_at_most)
                self._idle.notify_all()


# One per process: the interpreter lock that makes it needed is one per process too.
REQUESTS_FIRST = RequestsFirst()
