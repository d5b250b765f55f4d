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
from broker.services.inventory import WRITES

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
