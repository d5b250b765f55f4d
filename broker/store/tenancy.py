"""Tenants, their queues and API tokens: query and service functions that take a session."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping

from sqlalchemy import bindparam, exists, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from broker.engine.placement.fairness import fair_shares
from broker.store import events
from broker.store.db.models import (JOB_FINISHED_STATES, PLACEMENT_ACTIVE_STATES, PREEMPTION_POLICIES, RECLAIM_POLICIES,
                                    FAIR_SHARE_PREEMPTION_POLICIES, POD_SECURITY_LEVELS, Job, Placement, Queue, Tenant,
                                    Token, as_utc, utcnow)
from broker.store.errors import Conflict, Invalid, NotFound
from clusters.rules.durations import parse_duration
from clusters.rules.labels import is_dns_label
from clusters.system import SYSTEM_NAMESPACE
from clusters.rules.quantity import add_into, to_milli

def check_name(value: str, path: str = "name") -> str:
    if not is_dns_label(value):
        raise Invalid(path, f"{value!r} must be a DNS-1123 label: at most 63 lowercase letters, digits or '-', "
                            "starting and ending with a letter or digit")
    return value


def parse_resources(amounts: Mapping[str, Any] | None, path: str) -> dict[str, int] | None:
    """`{"nvidia.com/gpu": "64", "memory": "2Ti"}` → milli-units, saying which entry is wrong."""
    if amounts is None:
        return None
    parsed = {}
    for resource, quantity in amounts.items():
        try:
            parsed[resource] = to_milli(quantity)
        except (ValueError, TypeError):
            raise Invalid(f"{path}.{resource}", f"{quantity!r} is not a resource quantity (e.g. 64, 500m, 2Ti)"
                          ) from None
        if parsed[resource] < 0:
            raise Invalid(f"{path}.{resource}", "must not be negative")
    return parsed


# Tenants ---------------------------------------------------------------------------------------

def get_tenant(session: Session, name: str, *, for_update: bool = False) -> Tenant:
    """`for_update`: locked (FOR NO KEY UPDATE: jobs and queues may still be inserted that name it) for a write that
    decides from what the tenant holds, e.g. which of its queues is the default."""
    query = select(Tenant).where(Tenant.name == name)
    tenant = session.scalar(query.with_for_update(key_share=True) if for_update else query)
    if tenant is None:
        raise NotFound(f"tenant {name!r} does not exist")
    return tenant


def list_tenants(session: Session, only_id: int | None = None) -> list[Tenant]:
    query = select(Tenant).order_by(Tenant.name)
    if only_id is not None:
        query = query.where(Tenant.id == only_id)
    return list(session.scalars(query))


def list_queues(session: Session, only_tenant_id: int | None = None, tenant: str | None = None) -> list[Queue]:
    """Queues by tenant name, then name; a tenant's only, or a named tenant's."""
    query = select(Queue).join(Tenant).order_by(Tenant.name, Queue.name)
    if only_tenant_id is not None:
        query = query.where(Queue.tenant_id == only_tenant_id)
    if tenant:
        query = query.where(Tenant.name == tenant)
    return list(session.scalars(query))


def queue_fair_shares(session: Session) -> dict[int, float]:
    """Each queue's fair share (by id): its tenant's weight among the tenants with work, then its own weight
    among its tenant's queues with work."""
    rows = session.execute(select(Queue.id, Queue.weight, Tenant.id, Tenant.weight).join(Tenant)).all()
    active = session.scalars(select(Queue.id).where(
        exists().where(Job.queue_id == Queue.id, Job.state.not_in(JOB_FINISHED_STATES)))).all()
    return fair_shares({tenant: weight for _, _, tenant, weight in rows},
                       {queue: (tenant, weight) for queue, weight, tenant, _ in rows}, active)


# PostgreSQL advisory lock key ("nmsp") held while a tenant's namespaces are checked and given: no table constraint
# says a namespace belongs to one tenant (they are a JSON list per tenant).
NAMESPACES_LOCK = 0x6E6D7370


# Names no tenant may be given: the cluster's own namespaces and the broker's (its identity lives there).
RESERVED_NAMESPACES = ("default", SYSTEM_NAMESPACE)
RESERVED_PREFIXES = ("kube-", "openshift-")


def check_unreserved(name: str, path: str, reserved: tuple[str, ...] = ()) -> str:
    """`name` if no tenant is barred from it: the namespaces a cluster keeps for itself and those an admin reserved
    (ARCHIPELAGO_RESERVED_NAMESPACES)."""
    if name in RESERVED_NAMESPACES or name in reserved or name.startswith(RESERVED_PREFIXES):
        raise Invalid(path, f"{name!r} is reserved for the members' own use (default, kube-*, openshift-*, the "
                            "broker's archipelago-system and ARCHIPELAGO_RESERVED_NAMESPACES): choose another name")
    return name


def _check_namespaces(session: Session, namespaces: list[str], tenant_id: int | None,
                      reserved: tuple[str, ...]) -> list[str]:
    for i, namespace in enumerate(namespaces):
        check_unreserved(check_name(namespace, f"namespaces[{i}]"), f"namespaces[{i}]", reserved)
    if len(set(namespaces)) != len(namespaces):
        raise Invalid("namespaces", "a namespace is listed twice")
    if session.get_bind().dialect.name == "postgresql":  # two replicas giving one namespace away at once: in turn
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": NAMESPACES_LOCK})
    for other in session.scalars(select(Tenant).where(Tenant.id != (tenant_id or -1))):
        shared = set(other.namespaces) & set(namespaces)
        if shared:
            raise Conflict(f"namespace {sorted(shared)[0]!r} already belongs to tenant {other.name!r}")
    return namespaces


def _check_weight(weight: float) -> float:
    if not weight > 0:
        raise Invalid("weight", "must be greater than 0")
    return weight


def _check_choice(field: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise Invalid(field, f"must be one of {', '.join(allowed)}")
    return value


@dataclass
class TenantChanges:
    """What an admin gives a tenant (None: unchanged, or the default for a new tenant)."""

    namespaces: list[str] | None = None
    weight: float | None = None
    fair_share_preemption: str | None = None
    pod_security: str | None = None
    adoptable_namespaces: list[str] | None = None


def _apply_tenant_changes(session: Session, tenant: Tenant, changes: TenantChanges,
                          reserved: tuple[str, ...]) -> list[str]:
    """Applies `changes`; returns them in words for the tenant's event."""
    said = []
    if changes.namespaces is not None:
        tenant.namespaces = _check_namespaces(session, changes.namespaces, tenant.id, reserved)
        said.append(f"namespaces now {', '.join(changes.namespaces)}")
    if changes.weight is not None:
        tenant.weight = _check_weight(changes.weight)
        said.append(f"weight now {changes.weight:g}")
    if changes.fair_share_preemption is not None:
        tenant.fair_share_preemption = _check_choice("fair_share_preemption", changes.fair_share_preemption,
                                                     FAIR_SHARE_PREEMPTION_POLICIES)
        said.append(f"fair-share preemption now {changes.fair_share_preemption}")
    if changes.pod_security is not None:
        tenant.pod_security = _check_choice("pod_security", changes.pod_security, POD_SECURITY_LEVELS)
        said.append(f"Pod Security level now {changes.pod_security}")
    if changes.adoptable_namespaces is not None:
        tenant.adoptable_namespaces = list(changes.adoptable_namespaces)
        said.append(f"adoptable namespaces now {', '.join(changes.adoptable_namespaces) or '(none)'}")
    stray = sorted(set(tenant.adoptable_namespaces or ()) - set(tenant.namespaces))
    if stray:
        raise Invalid("adoptable_namespaces", f"{stray[0]!r} is not one of the tenant's namespaces "
                                              f"({', '.join(tenant.namespaces)}): only its own may be adopted")
    return said


def create_tenant(session: Session, name: str, changes: TenantChanges | None = None,
                  reserved: tuple[str, ...] = ()) -> Tenant:
    changes = changes or TenantChanges()
    check_unreserved(check_name(name), "name", reserved)
    if session.scalar(select(Tenant.id).where(Tenant.name == name)) is not None:
        raise Conflict(f"tenant {name!r} already exists")
    tenant = Tenant(name=name, namespaces=[], weight=1.0, fair_share_preemption="Never", pod_security="baseline",
                    adoptable_namespaces=[])
    _apply_tenant_changes(session, tenant, TenantChanges(
        changes.namespaces or [name], changes.weight, changes.fair_share_preemption, changes.pod_security,
        changes.adoptable_namespaces), reserved)
    session.add(tenant)
    try:
        session.flush()
    except IntegrityError:  # a concurrent create of the same name
        raise Conflict(f"tenant {name!r} already exists") from None
    events.record(session, "tenant", name, "Created", f"tenant {name} created with namespaces "
                  f"{', '.join(tenant.namespaces)}, weight {tenant.weight:g} and Pod Security level "
                  f"{tenant.pod_security}", tenant_id=tenant.id)
    return tenant


def update_tenant(session: Session, name: str, changes: TenantChanges, reserved: tuple[str, ...] = ()) -> Tenant:
    """Change what is given. A new Pod Security level reaches the members' namespaces with the next dispatcher
    pass (broker.services.namespaces)."""
    tenant = get_tenant(session, name)
    said = _apply_tenant_changes(session, tenant, changes, reserved)
    if said:
        events.record(session, "tenant", name, "Updated", "; ".join(said), tenant_id=tenant.id)
    return tenant


def delete_tenant(session: Session, name: str) -> None:
    tenant = get_tenant(session, name)
    if session.scalar(select(func.count()).select_from(Job).where(Job.tenant_id == tenant.id)):
        raise Conflict(f"tenant {name!r} still has jobs; it is kept for their history")
    if session.scalar(select(func.count()).select_from(Queue).where(Queue.tenant_id == tenant.id)):
        raise Conflict(f"tenant {name!r} still has queues; delete them first")
    session.delete(tenant)


# Queues ----------------------------------------------------------------------------------------

@dataclass
class QueueChanges:
    weight: float | None = None
    priority: int | None = None
    nominal_quota: Mapping[str, Any] | None = None
    borrowing_limit: Mapping[str, Any] | None = None
    preemption_policy: str | None = None
    reclaim_within_cohort: str | None = None
    default: bool | None = None
    default_runtime: str | None = None  # a duration
    clear_borrowing_limit: bool = False  # back to no limit (None above means "unchanged")


# Every request's query, built once (building it cost more than running it on SQLite): a token with its tenant.
# (A submission reads the tenant's queues with it, `Submitter`: no other request needs them.)



def get_queue(session: Session, name: str, tenant_id: int | None = None) -> Queue:
    """A queue by name; with `tenant_id`, only if that tenant owns it (else it does not exist)."""
    queue = session.scalar(select(Queue).where(Queue.name == name))
    if queue is None or (tenant_id is not None and queue.tenant_id != tenant_id):
        raise NotFound(f"queue {name!r} does not exist")
    return queue


def _apply_queue_changes(session: Session, queue: Queue, changes: QueueChanges) -> None:
    if changes.weight is not None:
        if changes.weight <= 0:
            raise Invalid("weight", "must be greater than 0")
        queue.weight = changes.weight
    if changes.priority is not None:
        queue.priority = changes.priority
    if changes.nominal_quota is not None:
        queue.nominal_quota = parse_resources(changes.nominal_quota, "nominal_quota")
    if changes.borrowing_limit is not None:
        queue.borrowing_limit = parse_resources(changes.borrowing_limit, "borrowing_limit")
    elif changes.clear_borrowing_limit:
        queue.borrowing_limit = None
    if changes.preemption_policy is not None:
        if changes.preemption_policy not in PREEMPTION_POLICIES:
            raise Invalid("preemption_policy", f"must be one of {', '.join(PREEMPTION_POLICIES)}")
        queue.preemption_policy = changes.preemption_policy
    if changes.reclaim_within_cohort is not None:
        if changes.reclaim_within_cohort not in RECLAIM_POLICIES:
            raise Invalid("reclaim_within_cohort", f"must be one of {', '.join(RECLAIM_POLICIES)}")
        queue.reclaim_within_cohort = changes.reclaim_within_cohort
    if changes.default_runtime is not None:
        try:
            seconds = parse_duration(changes.default_runtime)
        except ValueError as exc:
            raise Invalid("default_runtime", str(exc)) from None
        if not 0 < seconds < float("inf"):
            raise Invalid("default_runtime", "must be a positive duration, e.g. 2h")
        queue.default_runtime = seconds
    if changes.default:
        session.execute(select(Tenant.id).where(Tenant.id == queue.tenant_id).with_for_update(key_share=True))
        for other in session.scalars(select(Queue).where(Queue.tenant_id == queue.tenant_id, Queue.id != queue.id,
                                                         Queue.is_default.is_(True))):
            other.is_default = False
        queue.is_default = True
    elif changes.default is False:
        queue.is_default = False


def create_queue(session: Session, name: str, tenant_name: str, changes: QueueChanges) -> Queue:
    check_name(name)
    tenant = get_tenant(session, tenant_name, for_update=True)  # its first queue is its default: one at a time
    if session.scalar(select(Queue.id).where(Queue.name == name)) is not None:
        raise Conflict(f"queue {name!r} already exists")
    first = session.scalar(select(func.count()).select_from(Queue).where(Queue.tenant_id == tenant.id)) == 0
    queue = Queue(name=name, tenant_id=tenant.id, weight=1.0, priority=0, nominal_quota={},
                  preemption_policy="Never", reclaim_within_cohort="Never", is_default=False)
    session.add(queue)
    try:
        session.flush()
    except IntegrityError:  # a concurrent create of the same name
        raise Conflict(f"queue {name!r} already exists") from None
    _apply_queue_changes(session, queue, changes)
    if first and changes.default is None:
        queue.is_default = True
    events.record(session, "queue", name, "Created", f"queue {name} created for tenant {tenant.name}",
                  tenant_id=tenant.id)
    return queue


def update_queue(session: Session, name: str, changes: QueueChanges) -> Queue:
    queue = get_queue(session, name)
    _apply_queue_changes(session, queue, changes)
    events.record(session, "queue", name, "Updated", "queue settings changed", tenant_id=queue.tenant_id)
    return queue


def delete_queue(session: Session, name: str) -> None:
    queue = get_queue(session, name)
    if session.scalar(select(func.count()).select_from(Job).where(Job.queue_id == queue.id)):
        raise Conflict(f"queue {name!r} still holds jobs; it is kept for their history")
    session.delete(queue)


@dataclass(frozen=True)
class QueueStats:
    usage: dict[str, int]
    pending: int
    running: int
    oldest_pending_at: datetime | None
    next_expected_start: str | None = None  # the earliest forecast start of its waiting jobs (ISO 8601, UTC)


def queue_stats(session: Session, queue_ids: list[int]) -> dict[int, QueueStats]:
    """Usage (live placements not given up: one being deleted is not charged), pending depth, oldest wait and the
    next expected start (the forecast's) per queue, in three queries."""
    usage: dict[int, dict[str, int]] = {q: {} for q in queue_ids}
    rows = session.execute(select(Job.queue_id, Placement.resources).join(Placement, Placement.job_id == Job.id)
                           .where(Job.queue_id.in_(queue_ids), Placement.state.in_(PLACEMENT_ACTIVE_STATES)))
    for queue_id, resources in rows:
        add_into(usage[queue_id], resources or {})
    counts = {q: [0, 0, None] for q in queue_ids}
    rows = session.execute(select(Job.queue_id, Job.state, func.count(), func.min(Job.submitted_at))
                           .where(Job.queue_id.in_(queue_ids), Job.state.not_in(JOB_FINISHED_STATES))
                           .group_by(Job.queue_id, Job.state))
    for queue_id, state, count, oldest in rows:
        if state == "Queued":
            counts[queue_id][0] += count
            counts[queue_id][2] = oldest
        else:
            counts[queue_id][1] += count
    starts = dict(session.execute(select(Job.queue_id, func.min(Job.forecast["start"].as_string()))
                                  .where(Job.queue_id.in_(queue_ids), Job.state == "Queued").group_by(Job.queue_id)).all())
    return {q: QueueStats(usage[q], counts[q][0], counts[q][1], counts[q][2], starts.get(q)) for q in queue_ids}


# Tokens ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Principal:
    """Who a bearer token speaks for: an admin, or one tenant."""

    role: str
    tenant_id: int | None = None
    tenant_name: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def may_see(self, tenant_id: int | None) -> bool:
        return self.is_admin or (tenant_id is not None and tenant_id == self.tenant_id)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _live(revoked_at: datetime | None, expires_at: datetime | None) -> bool:
    return revoked_at is None and (expires_at is None or as_utc(expires_at) > utcnow())


@dataclass(frozen=True)
class QueueChoice:
    """A queue a submission may name, as `Submitter` carries it."""

    id: int
    name: str
    is_default: bool


@dataclass(frozen=True)
class Submitter:
    """A tenant as a submission reads it (broker.store.jobs.accept_jobs): plain values from one Core query. Loading
    `Tenant` and its queues through the ORM cost more than the rest of a single POST's database work."""

    id: int
    name: str
    namespaces: list[str]
    pod_security: str
    queues: tuple[QueueChoice, ...]


_SUBMITTER_COLUMNS = (Tenant.id, Tenant.name, Tenant.namespaces, Tenant.pod_security, Queue.id, Queue.name, Queue.is_default)
_SUBMITTER_NAMED = (select(*_SUBMITTER_COLUMNS).outerjoin(Queue, Queue.tenant_id == Tenant.id)
                    .where(Tenant.name == bindparam("name")))


def _submitter(rows: list) -> Submitter | None:
    """From rows ending in _SUBMITTER_COLUMNS."""
    tenant_id, name, namespaces, pod_security = rows[0][-7:-3]
    if tenant_id is None:
        return None
    return Submitter(tenant_id, name, namespaces, pod_security,
                     tuple(QueueChoice(*row[-3:]) for row in rows if row[-3] is not None))


def submitter_named(session: Session, name: str) -> Submitter:
    """The tenant an admin submits for (`get_tenant`, as a submission reads it)."""
    rows = session.connection().execute(_SUBMITTER_NAMED, {"name": name}).all()
    if not rows:
        raise NotFound(f"tenant {name!r} does not exist")
    return _submitter(rows)


def create_token(session: Session, role: str, tenant_name: str | None, description: str | None = None,
                 expires_in: timedelta | None = None) -> tuple[Token, str]:
    """Mint a token; the secret is returned once and only its hash is kept."""
    if role not in ("admin", "tenant"):
        raise Invalid("role", "must be admin or tenant")
    if role == "tenant" and not tenant_name:
        raise Invalid("tenant", "a tenant token needs the tenant it speaks for")
    tenant = get_tenant(session, tenant_name) if tenant_name else None
    if role == "admin" and tenant is not None:
        raise Invalid("tenant", "an admin token speaks for no tenant; leave tenant out")
    secret = f"ap_{secrets.token_urlsafe(32)}"
    token = Token(token_hash=hash_token(secret), role=role, tenant_id=tenant.id if tenant else None,
                  description=description, expires_at=utcnow() + expires_in if expires_in else None)
    session.add(token)
    session.flush()
    return token, secret


def list_tokens(session: Session) -> list[tuple[Token, str | None]]:
    return list(session.execute(select(Token, Tenant.name).outerjoin(Tenant, Token.tenant_id == Tenant.id)
                                .order_by(Token.id)))


def revoke_token(session: Session, token_id: int) -> tuple[Token, str | None]:
    """The revoked token, and the name of the tenant it spoke for."""
    token = session.get(Token, token_id)
    if token is None:
        raise NotFound(f"token {token_id} does not exist")
    token.revoked_at = token.revoked_at or utcnow()
    return token, session.scalar(select(Tenant.name).where(Tenant.id == token.tenant_id))
