"""`archipelago overrides ...`: the cluster override rules of a running broker (admins)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from broker.cli.output import (Output, OutputOption, ServerOption, TokenOption, calling, client, emit, read_file,
                               usage_error)

overrides_app = typer.Typer(no_args_is_help=True, help="Cluster overrides: rules that rewrite JobSets on their way "
                                                       "to the clusters they target.")
TARGET = ("TARGET", lambda r: f"cluster={r['cluster']}" if "cluster" in r else f"selector={r['selector']!r}")
CHANGES = ("CHANGES", lambda r: ",".join(k for k in r if k not in ("name", "order", "cluster", "selector",
                                                                     "description")))
RULE_COLUMNS = [("ORDER", lambda r: r["order"]), ("NAME", lambda r: r["name"]), TARGET, CHANGES]


@overrides_app.command("list")
def overrides_list(output: Output = OutputOption, server: Optional[str] = ServerOption,
                   token: Optional[str] = TokenOption) -> None:
    """Every rule, in the order they apply."""
    emit(calling(lambda: client(server, token).get("/api/v1/overrides")), output, RULE_COLUMNS)


@overrides_app.command("get")
def overrides_get(name: str, output: Output = OutputOption, server: Optional[str] = ServerOption,
                  token: Optional[str] = TokenOption) -> None:
    """One rule as written."""
    emit(calling(lambda: client(server, token).get(f"/api/v1/overrides/{name}")),
         Output.yaml if output is Output.table else output)


@overrides_app.command("apply")
def overrides_apply(files: list[Path] = typer.Argument(..., help="YAML or JSON files, one rule a document"),
                    output: Output = OutputOption, server: Optional[str] = ServerOption,
                    token: Optional[str] = TokenOption) -> None:
    """Create each rule, or replace the one of that name."""
    from clusters.rules.documents import DocumentError, load_yaml_all  # YAML: only where it is read

    api = client(server, token)
    rules = []
    for path in files:
        try:
            rules += [(path, rule) for rule in load_yaml_all(read_file(path))]
        except DocumentError as exc:
            usage_error(f"{path}: {exc}")
    existing = {r["name"] for r in calling(lambda: api.get("/api/v1/overrides"))}
    applied = []
    for path, rule in rules:
        if not isinstance(rule, dict) or not isinstance(rule.get("name"), str):
            usage_error(f"{path}: each document is one rule with a name")
        if rule["name"] in existing:
            applied.append(calling(lambda: api.request("PUT", f"/api/v1/overrides/{rule['name']}", json=rule)))
        else:
            applied.append(calling(lambda: api.post("/api/v1/overrides", json=rule)))
    emit(applied, output, RULE_COLUMNS)


@overrides_app.command("delete")
def overrides_delete(name: str, server: Optional[str] = ServerOption, token: Optional[str] = TokenOption) -> None:
    """Delete a rule: copies applied from now on are sent without it."""
    calling(lambda: client(server, token).delete(f"/api/v1/overrides/{name}"))
    typer.echo(f"override rule {name} deleted")
