"""What a pull member's agent calls: the broker never opens a connection to such a member, so its agent
reports in here with the token minted when the member was registered. A token names one cluster, so an
agent can only speak for its own."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any, Iterator

from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from api.deps import SessionDep, SettingsDep, bearer
from api.problems import Problem
from api.schemas import problems
from broker import inventory
from broker.db.models import Cluster, utcnow
from broker.db.session import transaction
from broker.errors import Invalid
from broker.services.inventory import WRITES, flush, reported_mirror

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
    """The agent's cluster in a transaction of its own, queued behind this process's inventory writers."""
    with WRITES, transaction(request.app.state.db.sessions) as session:
        cluster = session.get(Cluster, cluster_id)
        if cluster is None:
            raise Problem(404, "this pull member was removed meanwhile")
        yield session, cluster


class Heartbeat(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: str | None = Field(None, description="the member's Kubernetes version (its /version gitVersion)")


@router.post("/heartbeat", responses=problems(401), summary="The agent is alive and its member answers it")
def heartbeat(body: Heartbeat, request: Request, settings: SettingsDep, cluster_id: AgentDep) -> dict[str, Any]:
    with writing(request, cluster_id) as (session, cluster):
        inventory.record_probe(session, cluster, now=utcnow(), grace=settings.not_ready_grace, version=body.version)
        return {"cluster": cluster.name, "state": cluster.state}


class Inventory(BaseModel):
    """What the member's API server lists, as the broker would have listed it (the same rows are written)."""

    model_config = ConfigDict(extra="forbid")

    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]] = Field(description="the pods not finished (phase neither Succeeded nor Failed)")
    hypernodes: list[dict[str, Any]] | None = Field(None, description="null where the member serves no HyperNodes")


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
