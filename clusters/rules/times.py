"""Times as Kubernetes writes them: RFC 3339 in UTC, to the second ("2026-12-07T14:20:00Z")."""

from __future__ import annotations

from datetime import datetime, timezone


def rfc3339(moment: datetime | float) -> str:
    """A datetime (a naive one is UTC: SQLite hands some back so) or seconds since the epoch."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, timezone.utc)
    elif moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
