"""The audit trail: every change an admin or a tenant asks for through the API — clusters, tenants, queues, tokens,
overrides, submissions and cancels, Pod Security levels — is one append-only record of who asked, from where, what,
and how it ended, as Kubernetes' audit log keeps at its Metadata level (no bodies: a kubeconfig never lands here).

The request's entry (`AUDIT`, a context variable set by `api.audit.AuditTrail`) learns who asks when the token is
authenticated (`heard`); the request's first write transaction adds the record before it commits (`Database.write`
calls `record_change`), so a change and its record are committed together or not at all. A request that wrote nothing
— refused (401, 403, 404, 422…), failed, or a change that changed nothing — gets its record in a transaction of its
own once answered (`record_answer`). Kept as long as events are (`ARCHIPELAGO_RETENTION_DAYS`).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from broker.store.db.models import AuditRecord, utcnow
from broker.store.errors import Invalid

MAX_PAGE = 500


@dataclass
class AuditEntry:
    """One mutating request, as its record will say."""

    method: str
    path: str
    source: str
    actor: str = "anonymous"
    tenant: str | None = None
    scope: dict | None = field(default=None, repr=False)  # the request's ASGI scope: its route, once routed
    written: bool = False  # its record is committed

    @property
    def route(self) -> str | None:
        """The route's template (/api/v1/queues/{name}); None when no route matched."""
        return getattr((self.scope or {}).get("route"), "path", None)


AUDIT: ContextVar[AuditEntry | None] = ContextVar("archipelago_audit", default=None)


def heard(role: str, tenant: str | None, token_id: int | None, user: str | None = None) -> None:
    """Who the request's token speaks for (`broker.store.authentication.authenticate`): the admin token of the settings, a
    stored token by its id, or a user the OpenID provider vouches for."""
    entry = AUDIT.get()
    if entry is not None:
        what = f"({role}{' ' + tenant if tenant else ''})"
        entry.actor = (f"oidc {user} {what}"[:128] if user is not None else "admin" if token_id is None
                       else f"token {token_id} {what}")
        entry.tenant = tenant


def record_change(session: Session) -> AuditEntry | None:
    """In a write transaction of a mutating request, before its commit: the record, once per request. Returns the
    entry to mark written once the commit is done (`Database.write`)."""
    entry = AUDIT.get()
    if entry is None or entry.written:
        return None
    session.execute(insert(AuditRecord).values(**_row(entry, 200, "succeeded")))
    return entry


def record_answer(session: Session, entry: AuditEntry, status: int) -> None:
    """The record of a request that committed nothing, by the status it was answered."""
    outcome = "succeeded" if status < 400 else "refused" if status < 500 else "failed"
    session.execute(insert(AuditRecord).values(**_row(entry, status, outcome)))
    entry.written = True


def _row(entry: AuditEntry, status: int, outcome: str) -> dict[str, Any]:
    return {"time": utcnow(), "actor": entry.actor, "tenant": entry.tenant, "source": entry.source[:64],
            "method": entry.method, "path": entry.path[:2048], "route": entry.route, "status": status,
            "outcome": outcome}


def list_audit(session: Session, *, actor: str | None = None, tenant: str | None = None,
               outcome: str | None = None, since: datetime | None = None, limit: int = 100,
               before: int | None = None) -> dict[str, Any]:
    """Records newest first; `before`: the id the previous page ended at (`next`)."""
    if outcome is not None and outcome not in ("succeeded", "refused", "failed"):
        raise Invalid("outcome", "one of succeeded, refused, failed")
    query = select(AuditRecord).order_by(AuditRecord.id.desc()).limit(limit + 1)
    for column, value in ((AuditRecord.actor, actor), (AuditRecord.tenant, tenant), (AuditRecord.outcome, outcome)):
        if value is not None:
            query = query.where(column == value)
    if since is not None:
        query = query.where(AuditRecord.time >= since)
    if before is not None:
        query = query.where(AuditRecord.id < before)
    rows = list(session.scalars(query))
    items = [{"id": r.id, "time": r.time, "actor": r.actor, "tenant": r.tenant, "source": r.source,
              "method": r.method, "path": r.path, "route": r.route, "status": r.status, "outcome": r.outcome}
             for r in rows[:limit]]
    return {"items": items, "next": rows[limit - 1].id if len(rows) > limit else None}


def prune_audit(session: Session, before: datetime, batch: int) -> int:
    """Delete up to `batch` records older than `before` (retention); the caller commits."""
    ids = session.scalars(select(AuditRecord.id).where(AuditRecord.time < before).order_by(AuditRecord.time)
                          .limit(batch)).all()
    if ids:
        session.execute(delete(AuditRecord).where(AuditRecord.id.in_(ids)))
    return len(ids)
