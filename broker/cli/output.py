"""How CLI commands print: a table for people by default, `-o json|yaml` for scripts."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

import typer

from broker.cli.client import ApiClient, ClientError


class Output(str, Enum):
    table = "table"
    wide = "wide"  # the table, nothing cut short
    json = "json"
    yaml = "yaml"


OutputOption = typer.Option(Output.table, "-o", "--output", help="table, wide (nothing cut short), json or yaml")
ServerOption = typer.Option(None, "--server", envvar="ARCHIPELAGO_SERVER", help="broker URL")
TokenOption = typer.Option(None, "--token", envvar="ARCHIPELAGO_TOKEN", help="bearer token", show_default=False)

Column = tuple[str, Callable[[dict], Any]]


def emit(data: Any, output: Output, columns: Sequence[Column] | None = None, title: str | None = None) -> None:
    import yaml  # here, not at start: `--help` and `version` stay quick
    from rich.console import Console
    from rich.table import Table

    if output is Output.wide:  # the table's columns, their cells whole (a cell cut short asks for `wide`)
        columns = [(header, getattr(cell, "whole", cell)) for header, cell in columns or ()] or None
        output = Output.table
    if output is Output.json:
        typer.echo(json.dumps(data, indent=2, default=str))
    elif output is Output.yaml or columns is None:  # a table needs columns; anything else reads as YAML
        typer.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip())
    else:
        rows = data if isinstance(data, list) else [data]
        table = Table(title=title, header_style="bold")
        for header, _ in columns:
            table.add_column(header)
        for row in rows:
            table.add_row(*("" if (value := cell(row)) is None else str(value) for _, cell in columns))
        Console().print(table)


def cut(value: Callable[[dict], Any], most: int) -> Callable[[dict], Any]:
    """A table cell of at most `most` characters ("…" where cut); `-o wide` shows it whole."""
    def short(row: dict) -> Any:
        text = value(row)
        return text if not isinstance(text, str) or len(text) <= most else text[:most - 1] + "…"

    short.whole = value
    return short


def calling(action: Callable[[], Any]) -> Any:
    """Run one API call; a failure is one line on stderr and exit code 1."""
    try:
        return action()
    except ClientError as exc:
        typer.echo(f"archipelago: {exc}", err=True)
        raise typer.Exit(1) from None


def client(server: str | None, token: str | None) -> ApiClient:
    return ApiClient(server, token)


def usage_error(message: str) -> NoReturn:
    """A mistake in the command line itself: one line, exit code 2."""
    typer.echo(f"archipelago: {message}", err=True)
    raise typer.Exit(2)


def read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        usage_error(f"cannot read {path}: {exc.strerror}")


def key_values(pairs: list[str], option: str, example: str) -> dict[str, str]:
    """Repeatable `--option key=value` flags as a mapping."""
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            usage_error(f"{option} takes {example}, not {pair!r}")
        parsed[key] = value
    return parsed
