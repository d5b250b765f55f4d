"""Who asks the Kubernetes front door (a bearer token: the broker's own, or an ID token of its OpenID provider), and
the namespaces it may use."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from api.deps import SessionDep, SettingsDep
from api.identity import verifier_for
from api.kube.errors import KubeError, forbidden
from broker.store.errors import IdentityRefused
from broker.store.authentication import authenticate
from broker.store.tenancy import Principal


class Caller:
    """Who asks, and the namespaces they may use (None: every one, for an admin)."""

    def __init__(self, principal: Principal, namespaces: list[str] | None) -> None:
        self.principal, self.namespaces = principal, namespaces
        self.user = "admin" if principal.is_admin else f"tenant:{principal.tenant_name}"

    def scope(self, verb: str, namespace: str | None) -> list[str] | None:
        """The namespaces a request covers; 403 outside the caller's."""
        if namespace is None:
            return self.namespaces
        if self.namespaces is not None and namespace not in self.namespaces:
            raise forbidden(self.user, verb, namespace)
        return [namespace]


def get_caller(request: Request, session: SessionDep, settings: SettingsDep) -> Caller:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    try:
        principal = authenticate(session, settings.admin_token, token, verifier_for(settings),
                                 request.headers.get("x-archipelago-tenant")) \
            if scheme.lower() == "bearer" and token else None
    except IdentityRefused as exc:
        raise KubeError(401, f"Unauthorized: {exc}") from None
    if principal is None:
        raise KubeError(401, "Unauthorized")
    tenant = session.info.get("tenant")
    return Caller(principal, None if principal.is_admin else list(tenant.namespaces if tenant else []))


CallerDep = Annotated[Caller, Depends(get_caller)]
