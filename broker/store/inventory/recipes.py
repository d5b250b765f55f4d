"""Topology recipes (`clusters.recipes`) in the inventory: the admins' own, and how each cluster's tree is found
(`Discovery`: its choice among them)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.store.db.models import Cluster, TopologyRecipe
from broker.store.errors import Conflict, Invalid, NotFound
from clusters.recipes import AUTO, BUILT_IN, Recipe, RecipeError, discover, parse_recipe
from clusters.topology import Topology

log = logging.getLogger("archipelago.inventory")


@dataclass(frozen=True)
class Discovery:
    """How one cluster's tree is found from its node labels: its choice, the admins' recipes, the global list."""

    choice: str
    recipes: tuple[Recipe, ...]
    global_tiers: tuple[tuple[str, ...], ...]

    def discover(self, node_labels: Mapping[str, Mapping[str, str]]) -> tuple[Topology, str]:
        return discover(node_labels, self.choice, {r.name: r for r in self.recipes}, self.global_tiers)


def admin_recipes(session: Session) -> tuple[Recipe, ...]:
    """The admins' recipes; one stored that no longer reads (a later built-in took its name) is left out."""
    recipes = []
    for name, tiers in session.execute(select(TopologyRecipe.name, TopologyRecipe.tiers).order_by(TopologyRecipe.name)):
        try:
            recipes.append(parse_recipe(name, {"tiers": tiers}))
        except RecipeError:
            log.warning("topology recipe %s no longer reads; it is left out", name)
    return tuple(recipes)


def discovery_of(session: Session, cluster: Cluster, global_tiers: Sequence[Sequence[str]]) -> Discovery:
    return Discovery(cluster.topology_recipe, admin_recipes(session), tuple(tuple(t) for t in global_tiers))


def list_recipes(session: Session) -> list[dict[str, Any]]:
    """Built in first, then the admins', each with its tiers (closest first) and the clusters set to it."""
    chosen: dict[str, list[str]] = {}
    for name, recipe in session.execute(select(Cluster.name, Cluster.topology_recipe).order_by(Cluster.name)):
        chosen.setdefault(recipe, []).append(name)
    return [{**recipe.as_dict(), "built_in": recipe.name in BUILT_IN, "clusters": chosen.get(recipe.name, [])}
            for recipe in (*BUILT_IN.values(), *admin_recipes(session))]


def create_recipe(session: Session, name: str, body: Mapping[str, Any]) -> Recipe:
    try:
        recipe = parse_recipe(name, body)
    except RecipeError as exc:
        raise Invalid("", str(exc)) from None
    if session.scalar(select(TopologyRecipe.id).where(TopologyRecipe.name == name)) is not None:
        raise Conflict(f"topology recipe {name} exists; delete it first to change it")
    session.add(TopologyRecipe(name=name, tiers=[list(t.keys) for t in recipe.tiers]))
    return recipe


def delete_recipe(session: Session, name: str) -> None:
    """Refused while a cluster is set to it; its row locked first, as `check_choice` locks it: a cluster set to it
    meanwhile waits, then finds it gone."""
    row = session.scalar(select(TopologyRecipe).where(TopologyRecipe.name == name).with_for_update())
    if row is None:
        raise NotFound("built-in topology recipes cannot be deleted" if name in BUILT_IN
                       else f"topology recipe {name} does not exist")
    using = list(session.scalars(select(Cluster.name).where(Cluster.topology_recipe == name).order_by(Cluster.name)))
    if using:
        raise Conflict(f"clusters {', '.join(using)} use topology recipe {name}; set them to another first")
    session.delete(row)


def check_choice(session: Session, choice: str) -> str:
    """A cluster's recipe: auto, a built-in one, or an admin's; else a 422 that lists them."""
    if choice == AUTO or choice in BUILT_IN:
        return choice
    if session.scalar(select(TopologyRecipe.id).where(TopologyRecipe.name == choice).with_for_update()) is None:
        known = [AUTO, *BUILT_IN, *session.scalars(select(TopologyRecipe.name).order_by(TopologyRecipe.name))]
        raise Invalid("topology_recipe", f"no topology recipe {choice!r}; one of {', '.join(known)}")
    return choice
