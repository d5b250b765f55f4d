"""What a pull member's agent calls: the broker never opens a connection to such a member, so its agent
reports in here with the token minted when the member was registered. A token names one cluster, so an
agent can only speak for its own."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any, Iterator, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy.orm import Session

from api.deps import SessionDep, SettingsDep, bearer
from api.problems import Problem
from api.schemas import problems
from broker.services import assigned_work, flush, record_listed, reported_mirror, reported_outcomes
from broker.store import inventory
from broker.store.db.models import Cluster, utcnow
from broker.store.errors import Invalid

router = APIRouter(prefix="/api/v1/agent", tags=["agent"])


def agent_of(session: SessionDep,
             credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> int:
    """The id of the cluster whose agent is calling."""
    cluster = credentials and inventory.agent_cluster(session, credentials.credentials)
    if cluster is None:
        raise Problem(401, "send the agent token minted when this pull member was registered",
                      headers={"WWW-Authenticate": "Bearer"})
    return cluster.id


AgentDep = Annotated[int, Depends(agent_of)]


@contextlib.contextmanager
def writing(request: Request, cluster_id: int) -> Iterator[tuple[Session, Cluster]]:
    """The agent's cluster in a write of its own."""
    with request.app.state.db.write() as session:
        cluster = inventory.cluster_to_change(session, cluster_id)
        if cluster is None:
            raise Problem(404, "this pull member was removed meanwhile")
        yield session, cluster


class Heartbeat(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: str | None = Field(None, description="the member's Kubernetes version (its /version gitVersion)")
    jobset_crd: bool | None = Field(None, description="whether the member serves jobsets.jobset.x-k8s.io/v1alpha2")


@router.post("/heartbeat", responses=problems(401), summary="The agent is alive and its member answers it")
def heartbeat(body: Heartbeat, request: Request, settings: SettingsDep, cluster_id: AgentDep) -> dict[str, Any]:
    with writing(request, cluster_id) as (session, cluster):
        inventory.record_probe(session, cluster, now=utcnow(), grace=settings.not_ready_grace, version=body.version)
        if body.jobset_crd is not None and cluster.jobset_crd != body.jobset_crd:
            cluster.jobset_crd = body.jobset_crd
        return {"cluster": cluster.name, "state": cluster.state}


class Inventory(BaseModel):
    """What the member's API server lists, as the broker would have listed it (the same rows are written)."""

    model_config = ConfigDict(extra="forbid")

    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]] = Field(description="the pods not finished (phase neither Succeeded nor Failed)")
    hypernodes: list[dict[str, Any]] | None = Field(None, description="null where the member serves no HyperNodes")
    resourceslices: list[dict[str, Any]] | None = Field(None, description="null where the member serves no "
                                                                          "resource.k8s.io/v1 (older than 1.34)")
    deviceclasses: list[dict[str, Any]] | None = None
    resourceclaims: list[dict[str, Any]] | None = None


@router.post("/inventory", responses=problems(401, 422), summary="The member's nodes, pods and HyperNodes")
def report_inventory(body: Inventory, request: Request, settings: SettingsDep, cluster_id: AgentDep) -> dict[str, Any]:
    try:
        mirror = reported_mirror(body.model_dump())
        result = flush(request.app.state.db, settings, cluster_id, mirror)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise Invalid("inventory", f"an object is not as the member's API server serves it: {exc!r}") from None
    if result is None:
        raise Problem(404, "this pull member was removed meanwhile")
    if result.changed:
        request.app.state.capacity.forget()
    return {"nodes": len(mirror.nodes), "changed": result.changed}


@router.post("/work", responses=problems(401), summary="The copies this member is to apply, delete and keep")
def work(request: Request, cluster_id: AgentDep) -> dict[str, Any]:
    """Decided placements move to Applying here, committed before the agent is answered."""
    assigned = assigned_work(request.app.state.db, cluster_id, utcnow())
    assigned.changes.wake(request.app.state.services.wake)
    return {"apply": [{"placement_id": w.placement_id, "namespace": w.namespace, "name": w.name, "jobset": w.jobset,
                       "claim_templates": list(w.claim_templates)}
                      for w in assigned.work if w.state == "Applying"],
            "delete": [{"placement_id": w.placement_id, "namespace": w.namespace, "name": w.name,
                        "uid": w.member_uid} for w in assigned.work if w.deletes],
            "kept": assigned.kept,
            "namespaces": [{"name": name, "labels": labels, "adoptable": adoptable}
                           for name, (labels, adoptable) in sorted(assigned.namespaces.items())]}


class Outcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    placement_id: int
    action: Literal["apply", "delete"]
    kind: Literal["done", "retry", "refuse", "fail"] = Field(description="refuse: the member's admission will not take "
                                                                     "the copy; fail: it cannot be made there at all")
    error: str | None = None
    delay: float | None = Field(None, ge=0, description="seconds before the next try (retry); default: back-off")
    jobset: dict[str, Any] | None = Field(None, description="the member's answer to the apply (done)")
    adopted: bool = Field(False, description="the apply found the placement's own copy there already")

    @model_validator(mode="after")
    def _applied_copy(self) -> Outcome:
        if self.action == "apply" and self.kind == "done" and not (self.jobset or {}).get("metadata", {}).get("uid"):
            raise ValueError("a done apply sends the JobSet the member answered (with its metadata.uid)")
        if self.action == "delete" and self.kind in ("fail", "refuse"):
            raise ValueError("a delete is done or retried: it never fails a job (kind done or retry)")
        return self


class Outcomes(BaseModel):
    model_config = ConfigDict(extra="forbid")

    outcomes: list[Outcome]


@router.post("/outcomes", responses=problems(401, 422), summary="What the agent's applies and deletions came to")
def outcomes(body: Outcomes, request: Request, cluster_id: AgentDep) -> dict[str, Any]:
    reported_outcomes(request.app.state.db, cluster_id, [o.model_dump() for o in body.outcomes],
                      utcnow()).wake(request.app.state.services.wake)
    return {"recorded": len(body.outcomes)}


class Copies(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[dict[str, Any]] = Field(description="every JobSet of the broker's on the member, as listed")
    resourceVersion: str = Field(description="the list's resourceVersion")


@router.post("/status", responses=problems(401, 422), summary="The broker's JobSets on the member, as listed")
def status(body: Copies, request: Request, cluster_id: AgentDep) -> dict[str, Any]:
    try:
        changes = record_listed(request.app.state.db, cluster_id, body.items, body.resourceVersion, utcnow())
    except (KeyError, TypeError, AttributeError) as exc:
        raise Invalid("items", f"a JobSet is not as the member's API server serves it: {exc!r}") from None
    changes.wake(request.app.state.services.wake)
    return {"copies": len(body.items)}
