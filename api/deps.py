"""Request-scoped dependencies: a read session, the database to write in, and who is asking."""

from __future__ import annotations

from typing import Annotated, Iterator

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.identity import verifier_for
from api.problems import Problem
from broker.process.settings import Settings
from broker.store.errors import IdentityRefused
from broker.store.db.runtime import Database
from broker.store.authentication import authenticate, authenticate_submitter
from broker.store.tenancy import Principal, Submitter


def get_session(request: Request) -> Iterator[Session]:
    """A read (`Database.read`); a route that writes opens `Database.write` itself, so that its commit is done
    before it answers."""
    with request.app.state.db.read() as session:
        yield session


async def get_database(request: Request) -> Database:
    return request.app.state.db


async def get_settings_of_app(request: Request) -> Settings:
    """On the event loop: a plain `def` would cost every request a trip through the thread pool."""
    return request.app.state.settings


SessionDep = Annotated[Session, Depends(get_session)]
DatabaseDep = Annotated[Database, Depends(get_database)]
SettingsDep = Annotated[Settings, Depends(get_settings_of_app)]

_CHALLENGE = {"WWW-Authenticate": "Bearer"}
bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <token>`")


CredentialsDep = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def get_principal(request: Request, session: SessionDep, settings: SettingsDep,
                  credentials: CredentialsDep) -> Principal:
    return principal_of(session, settings, credentials, chosen_tenant(request))


def chosen_tenant(request: Request) -> str | None:
    """The tenant a signed-in user in several names for this request (the `tenant` parameter, or the header)."""
    return request.headers.get("x-archipelago-tenant") or request.query_params.get("tenant")


def principal_of(session: Session, settings: Settings, credentials: HTTPAuthorizationCredentials | None,
                 tenant: str | None = None) -> Principal:
    """Who is asking, or a 401; for a route that opens its session itself (one trip through the thread pool)."""
    try:
        principal = authenticate(session, settings.admin_token, _bearer(credentials), verifier_for(settings), tenant)
    except IdentityRefused as exc:
        raise Problem(401, str(exc), headers=_CHALLENGE) from None
    if principal is None:
        raise _unknown_token()
    return principal


def submitter_of(session: Session, settings: Settings, credentials: HTTPAuthorizationCredentials | None,
                 tenant: str | None = None) -> tuple[Principal, Submitter | None]:
    """`principal_of` for a submission: with a tenant's token, also the tenant it submits for (one query)."""
    try:
        found = authenticate_submitter(session, settings.admin_token, _bearer(credentials), verifier_for(settings),
                                       tenant)
    except IdentityRefused as exc:
        raise Problem(401, str(exc), headers=_CHALLENGE) from None
    if found is None:
        raise _unknown_token()
    return found


def _bearer(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None:
        raise Problem(401, "send a bearer token: `Authorization: Bearer <token>`", headers=_CHALLENGE)
    return credentials.credentials


def _unknown_token() -> Problem:
    return Problem(401, "the bearer token is unknown, revoked or expired", headers=_CHALLENGE)


def require_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if not principal.is_admin:
        raise Problem(403, "this needs an admin token", title="Forbidden")
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminDep = Annotated[Principal, Depends(require_admin)]
