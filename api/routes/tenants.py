"""Tenants, queues and tokens: admins manage them; a tenant reads its own queues."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from fastapi import APIRouter, Query, Request, Response

from api import schemas
from api.deps import AdminDep, DatabaseDep, PrincipalDep, SessionDep, SettingsDep
from api.schemas import problems
from api.views import queue_out
from broker.engine.placement.fairness import dominant_share, lent
from broker.store import audit, tenancy
from broker.store.db.models import Queue, Tenant
from broker.store.errors import NotFound
from clusters.rules.quantity import add_into

router = APIRouter(prefix="/api/v1")
AUTH_ERRORS = (401, 403)


def _tenants_out(request: Request, session, tenants: list[Tenant]) -> list[schemas.TenantOut]:
    """Each tenant with its fair share (the sum of its queues') and its dominant share of the federation."""
    totals = request.app.state.capacity.get(session).totals
    shares = tenancy.queue_fair_shares(session)
    stats = tenancy.queue_stats(session, [q.id for t in tenants for q in t.queues])
    out = []
    for tenant in tenants:
        usage: dict[str, int] = {}
        for q in tenant.queues:
            add_into(usage, stats[q.id].usage)
        out.append(schemas.TenantOut(
            name=tenant.name, namespaces=tenant.namespaces, weight=tenant.weight,
            fair_share_preemption=tenant.fair_share_preemption, pod_security=tenant.pod_security,
            adoptable_namespaces=tenant.adoptable_namespaces,
            queues=sorted(q.name for q in tenant.queues), created_at=tenant.created_at,
            fair_share=round(sum(shares.get(q.id, 0.0) for q in tenant.queues), 4),
            dominant_share=round(dominant_share(usage, totals), 4)))
    return out


def _changes(body: schemas.TenantIn | schemas.TenantPatch) -> tenancy.TenantChanges:
    return tenancy.TenantChanges(body.namespaces, body.weight, body.fair_share_preemption, body.pod_security,
                                 body.adoptable_namespaces)


@router.get("/tenants", tags=["tenants"], response_model=list[schemas.TenantOut], responses=problems(401))
def list_tenants(request: Request, session: SessionDep, principal: PrincipalDep):
    return _tenants_out(request, session, tenancy.list_tenants(session, None if principal.is_admin
                                                               else principal.tenant_id))


@router.post("/tenants", tags=["tenants"], status_code=201, response_model=schemas.TenantOut,
             responses=problems(*AUTH_ERRORS, 409, 422))
def create_tenant(body: schemas.TenantIn, request: Request, database: DatabaseDep, settings: SettingsDep,
                  _: AdminDep):
    with database.write() as session:
        tenant = tenancy.create_tenant(session, body.name, _changes(body), tuple(settings.reserved_namespaces))
        return _tenants_out(request, session, [tenant])[0]


@router.get("/tenants/{name}", tags=["tenants"], response_model=schemas.TenantOut, responses=problems(401, 404))
def get_tenant(name: str, request: Request, session: SessionDep, principal: PrincipalDep):
    tenant = tenancy.get_tenant(session, name)
    if not principal.may_see(tenant.id):
        raise NotFound(f"tenant {name!r} does not exist")
    return _tenants_out(request, session, [tenant])[0]


@router.patch("/tenants/{name}", tags=["tenants"], response_model=schemas.TenantOut,
              responses=problems(*AUTH_ERRORS, 404, 409, 422))
def update_tenant(name: str, body: schemas.TenantPatch, request: Request, database: DatabaseDep,
                  settings: SettingsDep, _: AdminDep):
    with database.write() as session:
        tenant = tenancy.update_tenant(session, name, _changes(body), tuple(settings.reserved_namespaces))
        return _tenants_out(request, session, [tenant])[0]


@router.delete("/tenants/{name}", tags=["tenants"], status_code=204, responses=problems(*AUTH_ERRORS, 404, 409))
def delete_tenant(name: str, database: DatabaseDep, _: AdminDep):
    with database.write() as session:
        tenancy.delete_tenant(session, name)
    return Response(status_code=204)


def _queues_out(request: Request, session, queues: list[Queue]) -> list[schemas.QueueOut]:
    """Each queue with its usage and depth, its fair share (`tenancy.queue_fair_shares`), and its dominant share
    of the federation."""
    totals = request.app.state.capacity.get(session).totals
    shares = tenancy.queue_fair_shares(session)
    cohorts = {q.tenant_id: q.tenant.queues for q in queues}  # what a queue lends depends on its siblings
    stats = tenancy.queue_stats(session, [q.id for siblings in cohorts.values() for q in siblings])
    lending = {}
    for siblings in cohorts.values():
        lending.update(lent({q.id: (q.nominal_quota, stats[q.id].usage) for q in siblings}))
    return [queue_out(queue, stats[queue.id], shares.get(queue.id, 0.0),
                      dominant_share(stats[queue.id].usage, totals), lending[queue.id]) for queue in queues]


@router.get("/queues", tags=["queues"], response_model=list[schemas.QueueOut], responses=problems(401))
def list_queues(request: Request, session: SessionDep, principal: PrincipalDep, tenant: str | None = None):
    queues = tenancy.list_queues(session, None if principal.is_admin else principal.tenant_id, tenant)
    return _queues_out(request, session, queues)


@router.post("/queues", tags=["queues"], status_code=201, response_model=schemas.QueueOut,
             responses=problems(*AUTH_ERRORS, 404, 409, 422))
def create_queue(body: schemas.QueueIn, request: Request, database: DatabaseDep, _: AdminDep):
    changes = tenancy.QueueChanges(**body.model_dump(exclude={"name", "tenant"}))
    with database.write() as session:
        queue = tenancy.create_queue(session, body.name, body.tenant, changes)
        return _queues_out(request, session, [queue])[0]


@router.get("/queues/{name}", tags=["queues"], response_model=schemas.QueueOut, responses=problems(401, 404))
def get_queue(name: str, request: Request, session: SessionDep, principal: PrincipalDep):
    queue = tenancy.get_queue(session, name, None if principal.is_admin else principal.tenant_id)
    return _queues_out(request, session, [queue])[0]


@router.patch("/queues/{name}", tags=["queues"], response_model=schemas.QueueOut,
              responses=problems(*AUTH_ERRORS, 404, 422))
def update_queue(name: str, body: schemas.QueueSettings, request: Request, database: DatabaseDep, _: AdminDep):
    clear = "borrowing_limit" in body.model_fields_set and body.borrowing_limit is None
    with database.write() as session:
        queue = tenancy.update_queue(session, name, tenancy.QueueChanges(**body.model_dump(),
                                                                          clear_borrowing_limit=clear))
        return _queues_out(request, session, [queue])[0]


@router.delete("/queues/{name}", tags=["queues"], status_code=204, responses=problems(*AUTH_ERRORS, 404, 409))
def delete_queue(name: str, database: DatabaseDep, _: AdminDep):
    with database.write() as session:
        tenancy.delete_queue(session, name)
    return Response(status_code=204)


def _token_out(row, tenant_name: str | None, model=schemas.TokenOut, **extra):
    return model(id=row.id, role=row.role, tenant=tenant_name, description=row.description,
                 created_at=row.created_at, expires_at=row.expires_at, revoked_at=row.revoked_at, **extra)


@router.post("/tokens", tags=["tokens"], status_code=201, response_model=schemas.TokenCreated,
             responses=problems(*AUTH_ERRORS, 404, 422))
def create_token(body: schemas.TokenIn, database: DatabaseDep, _: AdminDep):
    expires = timedelta(days=body.expires_in_days) if body.expires_in_days else None
    with database.write() as session:
        token, secret = tenancy.create_token(session, body.role, body.tenant, body.description, expires)
        return _token_out(token, body.tenant, schemas.TokenCreated, token=secret)


@router.get("/tokens", tags=["tokens"], response_model=list[schemas.TokenOut], responses=problems(*AUTH_ERRORS))
def list_tokens(session: SessionDep, _: AdminDep):
    return [_token_out(token, tenant_name) for token, tenant_name in tenancy.list_tokens(session)]


@router.delete("/tokens/{token_id}", tags=["tokens"], response_model=schemas.TokenOut,
               responses=problems(*AUTH_ERRORS, 404))
def revoke_token(token_id: schemas.ObjectId, database: DatabaseDep, _: AdminDep):
    with database.write() as session:
        return _token_out(*tenancy.revoke_token(session, token_id))


@router.get("/audit", tags=["audit"], responses=problems(*AUTH_ERRORS, 422),
            summary="The audit trail: every change asked through the API, who asked, from where, how it ended (admins)")
def list_audit(session: SessionDep, _: AdminDep,
               actor: str | None = Query(None, description='"admin", "token 12 (tenant research)", "anonymous"'),
               tenant: str | None = None,
               outcome: str | None = Query(None, description="succeeded, refused or failed"),
               since: datetime | None = None, limit: int = Query(100, ge=1, le=audit.MAX_PAGE),
               before: int | None = Query(None, description="the `next` of the previous page")) -> dict[str, Any]:
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=timezone.utc)
    return audit.list_audit(session, actor=actor, tenant=tenant, outcome=outcome, since=since, limit=limit,
                            before=before)
