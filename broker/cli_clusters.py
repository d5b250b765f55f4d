"""`archipelago clusters ...`: register member clusters and manage them on a running broker."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from broker.cli_output import (Output, OutputOption, ServerOption, TokenOption, calling, client, emit, key_values,
                                read_file)

clusters_app = typer.Typer(no_args_is_help=True, help="Member clusters: register, inspect, cordon, drain, remove.")


def _capacity(cluster: dict, resource: str) -> str:
    amounts = cluster["capacity"].get(resource)
    return f"{amounts['free']}/{amounts['allocatable']}" if amounts else ""


CLUSTER_COLUMNS = [
    ("NAME", lambda c: c["name"]), ("STATE", lambda c: c["state"]), ("VERSION", lambda c: c["kubernetes_version"]),
    ("NODES", lambda c: c["nodes"]), ("GPU FREE", lambda c: _capacity(c, "nvidia.com/gpu")),
    ("CPU FREE", lambda c: _capacity(c, "cpu")), ("TOPOLOGY", lambda c: c["hypernode_source"]),
    ("LABELS", lambda c: ",".join(f"{k}={v}" for k, v in c["labels"].items())),
    ("ERROR", lambda c: (c["last_error"] or "")[:60]),
]


def _tree_lines(hypernodes: list[dict], depth: int = 0) -> list[str]:
    lines = []
    for hypernode in hypernodes:
        free = ", ".join(f"{r}={q}" for r, q in hypernode["free"].items() if r in ("cpu", "nvidia.com/gpu"))
        lines.append(f"{'  ' * depth}{hypernode['name']} (tier {hypernode['tier']}, {hypernode['nodes']} nodes"
                     f"{', free ' + free if free else ''})")
        lines.extend(_tree_lines(hypernode["children"], depth + 1))
    return lines


@clusters_app.command("add")
def add(name: str = typer.Argument(..., help="the cluster's name in the broker"),
        kubeconfig: Path = typer.Option(..., "--kubeconfig", help="kubeconfig file (inline credentials)"),
        context: Optional[str] = typer.Option(None, "--context", help="context to use [default: current-context]"),
        label: list[str] = typer.Option([], "--label", help="cluster label key=value (repeatable)"),
        output: Output = OutputOption, server: Optional[str] = ServerOption,
        token: Optional[str] = TokenOption) -> None:
    """Register a member cluster; the broker checks it can reach it and that JobSet is installed."""
    body = {"name": name, "kubeconfig": read_file(kubeconfig).decode(), "context": context,
            "labels": key_values(label, "--label", "key=value")}
    emit(calling(lambda: client(server, token).post("/api/v1/clusters", json=body)), output, CLUSTER_COLUMNS)


@clusters_app.command("list")
def list_(output: Output = OutputOption, server: Optional[str] = ServerOption,
          token: Optional[str] = TokenOption) -> None:
    """Every cluster with its state and free capacity."""
    emit(calling(lambda: client(server, token).get("/api/v1/clusters")), output, CLUSTER_COLUMNS)


@clusters_app.command("get")
def get(name: str, output: Output = OutputOption, server: Optional[str] = ServerOption,
        token: Optional[str] = TokenOption) -> None:
    """One cluster: state, errors, capacity and its HyperNode tree."""
    cluster = calling(lambda: client(server, token).get(f"/api/v1/clusters/{name}"))
    if output is not Output.table:
        emit(cluster, output)
        return
    emit(cluster, output, CLUSTER_COLUMNS)
    for warning in cluster["warnings"]:
        typer.echo(f"warning: {warning}")
    typer.echo("\n".join(_tree_lines(cluster["hypernodes"])) or "no HyperNodes")


def _action(name: str, verb: str, output: Output, server: Optional[str], token: Optional[str]) -> None:
    emit(calling(lambda: client(server, token).post(f"/api/v1/clusters/{name}/{verb}")), output, CLUSTER_COLUMNS)


@clusters_app.command("cordon")
def cordon(name: str, output: Output = OutputOption, server: Optional[str] = ServerOption,
           token: Optional[str] = TokenOption) -> None:
    """Stop new placements on the cluster."""
    _action(name, "cordon", output, server, token)


@clusters_app.command("uncordon")
def uncordon(name: str, output: Output = OutputOption, server: Optional[str] = ServerOption,
             token: Optional[str] = TokenOption) -> None:
    """Allow placements on the cluster again."""
    _action(name, "uncordon", output, server, token)


@clusters_app.command("drain")
def drain(name: str, output: Output = OutputOption, server: Optional[str] = ServerOption,
          token: Optional[str] = TokenOption) -> None:
    """Cordon, and move placements that have not started to other clusters."""
    _action(name, "drain", output, server, token)


@clusters_app.command("remove")
def remove(name: str, force: bool = typer.Option(False, "--force", help="even while placements live there"),
           server: Optional[str] = ServerOption, token: Optional[str] = TokenOption) -> None:
    """Forget a cluster (refused while placements live there, unless --force)."""
    calling(lambda: client(server, token).delete(f"/api/v1/clusters/{name}", params={"force": str(force).lower()}))
    typer.echo(f"cluster {name} removed")
