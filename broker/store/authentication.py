"""Who a bearer token speaks for: the admin token of the settings, a token the broker made (only its hash is kept),
or an ID token of the OpenID provider (verified by `api.identity`; its groups give its role and tenant)."""

from __future__ import annotations

import hmac
from typing import Any, Protocol

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from broker.store.audit import heard
from broker.store.db.models import Queue, Tenant, Token
from broker.store.errors import IdentityRefused
from broker.store.tenancy import (_SUBMITTER_COLUMNS, Principal, Submitter, _live, _submitter, hash_token,
                                  submitter_named)

_TOKEN_AND_TENANT = (select(Token, Tenant).outerjoin(Tenant, Token.tenant_id == Tenant.id)
                     .where(Token.token_hash == bindparam("token_hash")))


def authenticate(session: Session, admin_token: str | None, token: str, identity: Identifies | None = None,
                 tenant: str | None = None) -> Principal | None:
    """The principal of a live token; None for an unknown, revoked or expired one. `identity`: the OpenID provider's
    verifier (`api.identity`), for ID tokens — IdentityRefused says why one is not accepted; `tenant`: the tenant a
    user in several names."""
    if admin_token and hmac.compare_digest(token.encode(), admin_token.encode()):
        heard("admin", None, None)
        return Principal("admin")
    if identity is not None and identity.takes(token):
        return _signed_in(session, identity.identity(token), tenant)[0]
    # The Tenant rides along: it lands in the session's identity map, where the request finds it again.
    row = session.execute(_TOKEN_AND_TENANT, {"token_hash": hash_token(token)}).one_or_none()
    if row is None:
        return None
    stored, tenant = row
    session.info["tenant"] = tenant  # the identity map holds objects weakly; this keeps it for the request
    if not _live(stored.revoked_at, stored.expires_at):
        return None
    heard(stored.role, tenant.name if tenant else None, stored.id)
    return Principal(stored.role, stored.tenant_id, tenant.name if tenant else None)


class Identifies(Protocol):
    """The OpenID provider's verifier (`api.identity.OidcVerifier`), as authentication uses it."""

    def takes(self, token: str) -> bool: ...

    def identity(self, token: str) -> Any: ...  # .user, .admin, .tenants; IdentityRefused when not accepted


def _signed_in(session: Session, who: Any, tenant: str | None) -> tuple[Principal, str | None]:
    """The principal of a user the OpenID provider vouches for: an admin, or the tenant its groups give it (the one
    it names, when they give it several); and that tenant's name."""
    if who.admin:
        heard("admin", None, None, user=who.user)
        return Principal("admin"), None
    if not who.tenants:
        raise IdentityRefused(f"{who.user} is in no group that maps to a tenant: ask an admin "
                              "(ARCHIPELAGO_OIDC_GROUP_TENANTS)")
    if tenant is None and len(who.tenants) > 1:
        raise IdentityRefused(f"{who.user} is in tenants {', '.join(who.tenants)}: name one (?tenant=NAME, the "
                              "X-Archipelago-Tenant header, or the CLI's --tenant)")
    name = tenant or who.tenants[0]
    if name not in who.tenants:
        raise IdentityRefused(f"{who.user} is not in tenant {name}'s groups (it is in {', '.join(who.tenants)})")
    found = session.execute(select(Tenant).where(Tenant.name == name)).scalar_one_or_none()
    if found is None:
        raise IdentityRefused(f"tenant {name}, which {who.user}'s groups map to, does not exist")
    session.info["tenant"] = found  # as for a stored token: the request finds it again
    heard("tenant", name, None, user=who.user)
    return Principal("tenant", found.id, name), name


# Built once, as _TOKEN_AND_TENANT: one row per queue of the token's tenant (one row, tenant NULL, for an admin token).
_TOKEN_AND_SUBMITTER = (select(Token.id.label("token_id"), Token.role, Token.revoked_at, Token.expires_at,
                               *_SUBMITTER_COLUMNS)
                        .outerjoin(Tenant, Token.tenant_id == Tenant.id).outerjoin(Queue, Queue.tenant_id == Tenant.id)
                        .where(Token.token_hash == bindparam("token_hash")))


def authenticate_submitter(session: Session, admin_token: str | None, token: str, identity: Identifies | None = None,
                           tenant: str | None = None) -> tuple[Principal, Submitter | None] | None:
    """`authenticate` for a submission: the principal and, for a tenant's token, the tenant it submits for, in one
    query; None for an unknown, revoked or expired token."""
    if admin_token and hmac.compare_digest(token.encode(), admin_token.encode()):
        heard("admin", None, None)
        return Principal("admin"), None
    if identity is not None and identity.takes(token):
        principal, name = _signed_in(session, identity.identity(token), tenant)
        return principal, None if name is None else submitter_named(session, name)
    rows = session.connection().execute(_TOKEN_AND_SUBMITTER, {"token_hash": hash_token(token)}).all()
    if not rows or not _live(rows[0].revoked_at, rows[0].expires_at):
        return None
    submitter = _submitter(rows)
    heard(rows[0].role, submitter and submitter.name, rows[0].token_id)
    return Principal(rows[0].role, submitter and submitter.id, submitter and submitter.name), submitter
