"""How much one member's API server is asked: client-go's QPS/burst token bucket, and the pause a
429 Too Many Requests asks for (Retry-After). One budget per member, taken by every request to it
(the inventory's lists and watches, the status watch, the dispatcher, the health probe), so the
broker as a whole never asks a member more than its settings allow.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class BudgetExhausted(Exception):
    """The next request could go out only after `wait` seconds, longer than the caller may wait."""

    def __init__(self, wait: float, throttled: bool) -> None:
        super().__init__(f"{wait:.1f} s")
        self.wait, self.throttled = wait, throttled


class RequestBudget:
    """A token bucket (`qps` tokens a second, at most `burst` saved; qps None: no limit) and the
    time before which the member asked to hear nothing. Thread-safe; a waiting caller holds a token
    reserved, so callers go out in the order they asked, spaced by 1/qps."""

    def __init__(self, qps: float | None, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.qps, self.burst = qps, max(burst, 1)
        self._clock, self._sleep = clock, sleep
        self._tokens = float(self.burst)
        self._refilled = clock()
        self._quiet_until = 0.0
        self._lock = threading.Lock()

    def take(self, max_wait: float) -> None:
        """Wait for a token and for the member's Retry-After to pass; BudgetExhausted instead (no
        token taken) when that would be longer than `max_wait` seconds."""
        with self._lock:
            now = self._clock()
            wait_for_token = 0.0
            if self.qps is not None:
                self._tokens = min(float(self.burst), self._tokens + (now - self._refilled) * self.qps)
                self._refilled = now
                wait_for_token = max(0.0, (1.0 - self._tokens) / self.qps)
            quiet = self._quiet_until - now
            wait = max(wait_for_token, quiet)
            if wait > max_wait:
                raise BudgetExhausted(wait, throttled=quiet >= wait_for_token)
            if self.qps is not None:
                self._tokens -= 1.0
        if wait > 0:
            self._sleep(wait)

    def hold(self, seconds: float) -> None:
        """The member answered 429 with Retry-After: nothing goes to it for `seconds`."""
        with self._lock:
            self._quiet_until = max(self._quiet_until, self._clock() + seconds)
