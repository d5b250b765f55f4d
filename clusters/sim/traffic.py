"""What a simulated API server was asked, and the manners of a real one under load: it can be told
to answer 429 Too Many Requests with a Retry-After for a while (as API Priority and Fairness does),
and serves lists at resourceVersion=0 as kube-apiserver's watch cache does.

Tests read the log through `SimHandle.requests(name)`: which requests arrived, when, and which were
refused, so a client's manners are asserted on what the server saw, not on what the client meant.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from urllib.parse import parse_qs

from clusters.sim.store import ApiError

KEPT = 20_000  # requests remembered per cluster
_BOOLEAN_PARAMETERS = ("watch", "allowWatchBookmarks", "sendInitialEvents", "force")
_GO_BOOLEANS = {"1": "true", "t": "true", "T": "true", "TRUE": "true", "true": "true", "True": "true",
                "0": "false", "f": "false", "F": "false", "FALSE": "false", "false": "false", "False": "false"}


@dataclass(frozen=True)
class Request:
    at: float  # time.monotonic() on arrival
    method: str
    path: str  # below the cluster's base URL, e.g. /api/v1/nodes
    query: dict[str, str]
    throttled: bool  # answered 429


class Traffic:
    """One cluster's request log and its throttle switch; thread-safe."""

    def __init__(self) -> None:
        self._log: collections.deque[Request] = collections.deque(maxlen=KEPT)
        self._lock = threading.Lock()
        self._throttled_until = 0.0
        self._retry_after = 1

    def throttle(self, retry_after: int, seconds: float) -> None:
        """For the next `seconds`, answer every request 429 with `Retry-After: retry_after`."""
        with self._lock:
            self._throttled_until, self._retry_after = time.monotonic() + seconds, retry_after

    def arrive(self, method: str, path: str, query: dict[str, str]) -> int | None:
        """Log a request; the Retry-After to answer it with when the cluster is throttled, else None."""
        now = time.monotonic()
        with self._lock:
            throttled = now < self._throttled_until
            self._log.append(Request(now, method, path, dict(query), throttled))
            return self._retry_after if throttled else None

    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._log)


def list_limit(query: dict[str, str]) -> int:
    """The page size a list is served with, checked as kube-apiserver 1.31 checks it. A list at
    resourceVersion=0 comes from the watch cache, which does not paginate: whole, whatever the limit."""
    version, match = query.get("resourceVersion", ""), query.get("resourceVersionMatch")
    if match and not version:
        raise ApiError(400, "BadRequest", "resourceVersionMatch is forbidden unless resourceVersion is provided")
    if query.get("continue") and (match or version not in ("", "0")):
        raise ApiError(400, "BadRequest", "specifying resource version is not allowed when using continue")
    return 0 if version == "0" else int(query.get("limit") or 0)


def parse_query(query_string: bytes) -> dict[str, str]:
    """A request's query parameters (the last of repeated ones), its booleans read as kube-apiserver
    reads them (Go's strconv.ParseBool: `True` and `1` are true, as older Python clients send them)."""
    query = {k: v[-1] for k, v in parse_qs(query_string.decode()).items()}
    for name in _BOOLEAN_PARAMETERS:
        if name in query:
            query[name] = _GO_BOOLEANS.get(query[name], query[name])
    return query
