"""Cluster overrides: admins write the rules that rewrite JobSets on their way to the clusters they target
(broker.engine.overrides says what a rule can do and in what order). A rule takes effect on the copies applied from
then on; the placements of a job say which rules their copy was rendered with."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from api.deps import AdminDep, DatabaseDep, SessionDep
from api.schemas import problems
from broker.store.cluster_overrides import (as_written, create_override, delete_override, get_override, list_overrides,
                                            replace_override)

router = APIRouter(prefix="/api/v1", tags=["overrides"])
ADMIN_ERRORS = (401, 403)


class OverrideIn(BaseModel):
    """A rule: one target (`cluster` or `selector`) and one or more changes, applied in the order listed."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, description="DNS-1123 label, unique among rules (PUT: the path's)")
    order: int = Field(0, description="rules apply lowest order first, then by name")
    cluster: str | None = Field(None, description="the one cluster it applies on")
    selector: str | None = Field(None, description="or: a label selector over the broker's cluster labels "
                                                   "(archipelago.io/cluster-selector syntax; \"\" is every cluster)")
    description: str | None = None
    image: dict[str, Any] | None = Field(None, description="{registry, from?}: replace the registry of each image "
                                                           "(of `from` only); or {prefix}: put it before each image")
    env: list[Any] | None = Field(None, description="[{name, value, container?}]: add or replace, in every "
                                                    "container or the one named")
    nodeSelector: dict[str, Any] | None = Field(None, description="entries added to (or replacing) the pods' nodeSelector")
    nodeAffinity: list[Any] | None = Field(None, description="matchExpressions ANDed into each required node "
                                                             "selector term of the pods")
    tolerations: list[Any] | None = Field(None, description="added to the pods' tolerations")
    labels: dict[str, Any] | None = Field(None, description="added to (or replacing) the JobSet's labels")
    annotations: dict[str, Any] | None = Field(None, description="added to (or replacing) the JobSet's annotations")
    podLabels: dict[str, Any] | None = Field(None, description="added to (or replacing) each pod template's labels")
    podAnnotations: dict[str, Any] | None = Field(None, description="added to each pod template's annotations")
    jsonPatch: list[Any] | None = Field(None, description="RFC 6902 operations on paths under /spec/replicatedJobs")

    def raw(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


@router.get("/overrides", responses=problems(*ADMIN_ERRORS), summary="Every override rule, in the order they apply")
def list_rules(session: SessionDep, _: AdminDep) -> list[dict[str, Any]]:
    return [as_written(row) for row in list_overrides(session)]


@router.post("/overrides", status_code=201, responses=problems(*ADMIN_ERRORS, 409, 422),
             summary="Create an override rule")
def create_rule(body: OverrideIn, database: DatabaseDep, _: AdminDep) -> dict[str, Any]:
    with database.write() as session:
        row = create_override(session, body.raw())
        return as_written(row)


@router.get("/overrides/{name}", responses=problems(*ADMIN_ERRORS, 404), summary="One override rule")
def get_rule(name: str, session: SessionDep, _: AdminDep) -> dict[str, Any]:
    return as_written(get_override(session, name))


@router.put("/overrides/{name}", responses=problems(*ADMIN_ERRORS, 404, 422), summary="Replace an override rule")
def replace_rule(name: str, body: OverrideIn, database: DatabaseDep, _: AdminDep) -> dict[str, Any]:
    with database.write() as session:
        row = replace_override(session, name, body.raw())
        return as_written(row)


@router.delete("/overrides/{name}", status_code=204, responses=problems(*ADMIN_ERRORS, 404),
               summary="Delete an override rule")
def delete_rule(name: str, database: DatabaseDep, _: AdminDep) -> Response:
    with database.write() as session:
        delete_override(session, name)
        return Response(status_code=204)
