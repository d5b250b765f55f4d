"""The audit trail's gate (pure ASGI, outermost): every request that may change something — POST, PUT, PATCH or
DELETE on the REST API or the Kubernetes front door — gets an entry before anything else runs, so that a request
refused at the door (401 before its body is read) is recorded too. The request's write commits its record with its
change (`broker.store.audit`); one that committed nothing is recorded here once answered, with its status.

Left out: a pull member's agent (its reports and heartbeats are no one's change) and dry runs (they change nothing).
A request with no known token writes at most ANONYMOUS_PER_SECOND records a second in each process: a stranger's
flood of requests must not become a flood of writes; the ones left out are counted
(`archipelago_audit_anonymous_dropped_total`).
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import anyio

from api.trust import AGENT_PREFIX, KUBE_PREFIX
from broker.process.metrics import AUDIT_ANONYMOUS_DROPPED
from broker.store.audit import AUDIT, AuditEntry, record_answer

log = logging.getLogger("archipelago.audit")

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ANONYMOUS_PER_SECOND = 20


class Budget:
    """At most `per_second` takes in each second of `clock`."""

    def __init__(self, per_second: int = ANONYMOUS_PER_SECOND, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second, self.clock = per_second, clock
        self._second, self._taken = None, 0

    def take(self) -> bool:
        second = int(self.clock())
        if second != self._second:
            self._second, self._taken = second, 0
        self._taken += 1
        return self._taken <= self.per_second


ANONYMOUS = Budget()


def audited(method: str, path: str, query: bytes) -> bool:
    return (method in MUTATING and (path.startswith("/api/") or path.startswith(KUBE_PREFIX + "/"))
            and not path.startswith(AGENT_PREFIX) and not path.endswith(":dry-run")
            and b"dryRun=" not in query)


class AuditTrail:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not audited(scope["method"], scope["path"], scope.get("query_string", b"")):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        entry = AuditEntry(method=scope["method"], path=scope["path"], source=client[0] if client else "", scope=scope)
        token = AUDIT.set(entry)
        status = 500

        async def sending(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            AUDIT.reset(token)
            if not entry.written and entry.actor == "anonymous" and not ANONYMOUS.take():
                AUDIT_ANONYMOUS_DROPPED.inc()
            elif not entry.written:
                database = scope["app"].state.db
                try:
                    await anyio.to_thread.run_sync(_record, database, entry, status)
                except Exception:  # noqa: BLE001 - the answer is sent; a lost record is logged, not raised
                    log.exception("audit record of %s %s not written", entry.method, entry.path)


def _record(database, entry: AuditEntry, status: int) -> None:
    with database.write() as session:
        record_answer(session, entry, status)
