"""`archipelago recipes ...`: the recipes that find a member's HyperNode tree from its node labels (admins write
their own; `archipelago clusters topology NAME --recipe R` chooses one per cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from broker.cli.output import (Output, OutputOption, ServerOption, TokenOption, calling, client, emit, read_file,
                               usage_error)

recipes_app = typer.Typer(no_args_is_help=True, help="Topology recipes: how a member's HyperNode tree is found from "
                                                     "its node labels.")
RECIPE_COLUMNS = [("NAME", lambda r: r["name"]), ("BUILT-IN", lambda r: "yes" if r.get("built_in") else ""),
                  ("TIERS (CLOSEST FIRST)", lambda r: " < ".join(" | ".join(keys) for keys in r["tiers"])),
                  ("CLUSTERS", lambda r: ",".join(r.get("clusters") or []))]


@recipes_app.command("list")
def recipes_list(output: Output = OutputOption, server: Optional[str] = ServerOption,
                 token: Optional[str] = TokenOption) -> None:
    """Every recipe, its tiers and the clusters set to it (the others are `auto`)."""
    emit(calling(lambda: client(server, token).get("/api/v1/topology-recipes")), output, RECIPE_COLUMNS)


@recipes_app.command("create")
def recipes_create(file: Path = typer.Argument(..., help="YAML or JSON: name, and tiers (closest first, label keys "
                                                          "per tier) or Volcano's levels ([{nodeLabel: key}, …] from "
                                                          "the highest domain down)"),
                   output: Output = OutputOption, server: Optional[str] = ServerOption,
                   token: Optional[str] = TokenOption) -> None:
    """Add a recipe."""
    from clusters.rules.documents import DocumentError, load_yaml_all  # YAML: only where it is read

    try:
        documents = load_yaml_all(read_file(file))
    except DocumentError as exc:
        usage_error(f"{file}: {exc}")
    if len(documents) != 1 or not isinstance(documents[0], dict):
        usage_error(f"{file}: one recipe, a mapping with a name and its tiers or levels")
    emit(calling(lambda: client(server, token).post("/api/v1/topology-recipes", json=documents[0])), output,
         RECIPE_COLUMNS)


@recipes_app.command("delete")
def recipes_delete(name: str, server: Optional[str] = ServerOption, token: Optional[str] = TokenOption) -> None:
    """Remove an admin's recipe that no cluster is set to."""
    calling(lambda: client(server, token).delete(f"/api/v1/topology-recipes/{name}"))
    typer.echo(f"recipe {name} deleted")
