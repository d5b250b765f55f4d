"""The append-only event log: every state change writes one, in the same transaction."""

from __future__ import annotations

from sqlalchemy.orm import Session

from broker.store.db.models import Event


def record(session: Session, kind: str, object_id: str | int, reason: str, message: str, *,
           warning: bool = False, tenant_id: int | None = None) -> Event:
    event = Event(kind=kind, object_id=str(object_id), reason=reason, message=message,
                  type="Warning" if warning else "Normal", tenant_id=tenant_id)
    session.add(event)
    return event
