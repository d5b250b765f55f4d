"""`archipelago audit`: the audit trail, newest first (admins): who changed what through the API, from where, and how
it ended."""

from __future__ import annotations

from typing import Optional

import typer

from broker.cli.output import Output, OutputOption, ServerOption, TokenOption, calling, client, emit

AUDIT_COLUMNS = [("TIME", lambda r: str(r["time"])[:19].replace("T", " ")), ("ACTOR", lambda r: r["actor"]),
                 ("FROM", lambda r: r["source"]), ("METHOD", lambda r: r["method"]), ("PATH", lambda r: r["path"]),
                 ("STATUS", lambda r: str(r["status"])), ("OUTCOME", lambda r: r["outcome"])]


def audit(actor: Optional[str] = typer.Option(None, help='e.g. "admin" or "token 12 (tenant research)"'),
          tenant: Optional[str] = typer.Option(None, help="what a tenant's tokens asked"),
          outcome: Optional[str] = typer.Option(None, help="succeeded, refused or failed"),
          since: Optional[str] = typer.Option(None, help="an ISO 8601 time, e.g. 2026-12-07T10:00:00Z"),
          limit: int = typer.Option(100, help="records, newest first (at most 500)"),
          output: Output = OutputOption, server: Optional[str] = ServerOption,
          token: Optional[str] = TokenOption) -> None:
    """The audit trail: every change asked through the API (admins only)."""
    params = {k: v for k, v in {"actor": actor, "tenant": tenant, "outcome": outcome, "since": since,
                                "limit": limit}.items() if v is not None}
    answer = calling(lambda: client(server, token).get("/api/v1/audit", params=params))
    emit(answer["items"] if output in (Output.table, Output.wide) else answer, output, AUDIT_COLUMNS)
