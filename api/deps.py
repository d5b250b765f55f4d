"""Request-scoped dependencies: a database session, and who is asking."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Annotated, Iterator

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.problems import Problem
from broker.db.models import Tenant, Token, as_utc, utcnow
from broker.settings import Settings


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.db.sessions() as session:
        yield session


def get_settings_of_app(request: Request) -> Settings:
    return request.app.state.settings


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings_of_app)]


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


_CHALLENGE = {"WWW-Authenticate": "Bearer"}
_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <token>`")


def authenticate(session: Session, settings: Settings, token: str) -> Principal | None:
    if settings.admin_token and hmac.compare_digest(token.encode(), settings.admin_token.encode()):
        return Principal("admin")
    row = session.execute(select(Token, Tenant.name).outerjoin(Tenant, Token.tenant_id == Tenant.id)
                          .where(Token.token_hash == hash_token(token))).first()
    if row is None:
        return None
    stored, tenant_name = row
    now = utcnow()
    if stored.revoked_at is not None or (stored.expires_at is not None and as_utc(stored.expires_at) <= now):
        return None
    return Principal(stored.role, stored.tenant_id, tenant_name)


def get_principal(session: SessionDep, settings: SettingsDep,
                  credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
    if credentials is None:
        raise Problem(401, "send a bearer token: `Authorization: Bearer <token>`", headers=_CHALLENGE)
    principal = authenticate(session, settings, credentials.credentials)
    if principal is None:
        raise Problem(401, "the bearer token is unknown, revoked or expired", headers=_CHALLENGE)
    return principal


def require_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if not principal.is_admin:
        raise Problem(403, "this needs an admin token", title="Forbidden")
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminDep = Annotated[Principal, Depends(require_admin)]
