"""Who is asking, and may they: the authentication and RBAC authorization of a simulated cluster.

Two kinds of identity, as on a real cluster: the cluster's bearer token (scenario `token`) is its
admin, allowed everything; a ServiceAccount's token, which a token controller writes into each
Secret of type kubernetes.io/service-account-token, is allowed only what the ClusterRoles and Roles
bound to it grant (ClusterRoleBindings, and RoleBindings in the request's namespace), else 403 with
kube-apiserver's wording. Discovery, /version and SelfSubjectAccessReviews are open to anyone
authenticated, as the default `system:discovery` and `system:basic-user` bindings make them.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from clusters.sim.resources import (CLUSTERROLEBINDINGS, CLUSTERROLES, ROLEBINDINGS, ROLES, SECRETS, SERVICEACCOUNTS,
                                    Kind)
from clusters.sim.store import ApiError

if TYPE_CHECKING:
    from clusters.sim.cluster import SimCluster

SERVICE_ACCOUNT_TOKEN = "kubernetes.io/service-account-token"
SA_NAME = "kubernetes.io/service-account.name"
SA_UID = "kubernetes.io/service-account.uid"
REVIEW_PATH = ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"]
_METHOD_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]
    admin: bool = False
    namespace: str = ""  # a ServiceAccount's
    account: str = ""


ADMIN = User("kubernetes-admin", ("system:masters", "system:authenticated"), admin=True)


def request_verb(method: str, named: bool, watch: bool) -> str:
    if method == "GET":
        return "get" if named else "watch" if watch else "list"
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    return _METHOD_VERBS.get(method, method.lower())


def _has(values: Iterable[str] | None, wanted: str) -> bool:
    values = values or ()
    return "*" in values or wanted in values


def _rule_allows(rule: dict, verb: str, group: str, resource: str, name: str) -> bool:
    resources = rule.get("resources") or ()
    sub = resource.partition("/")[2]
    return (_has(rule.get("verbs"), verb) and _has(rule.get("apiGroups"), group)
            and (_has(resources, resource) or (sub and f"*/{sub}" in resources))
            and (not rule.get("resourceNames") or name in rule["resourceNames"]))


class Rbac:
    """Authentication, authorization and the ServiceAccount token controller of one cluster."""

    def __init__(self, cluster: SimCluster, admin_token: str, access_reviews: bool = True) -> None:
        self.cluster, self.store = cluster, cluster.store
        self._admin_header = f"Bearer {admin_token}"
        self.access_reviews = access_reviews
        self.pending: set[tuple[str, str]] = set()  # token Secrets to fill
        self._gone_accounts: set[tuple[str, str]] = set()  # deleted ServiceAccounts whose tokens go too
        self.store.listeners.append(self._on_event)

    # authentication --------------------------------------------------------------------------------
    def authenticate(self, header: str) -> User | None:
        if header == self._admin_header:
            return ADMIN
        scheme, _, token = header.partition(" ")
        if scheme != "Bearer" or not token:
            return None
        encoded = base64.b64encode(token.encode()).decode()
        for secret in self.store.items(SECRETS.key):
            if secret.get("type") == SERVICE_ACCOUNT_TOKEN and (secret.get("data") or {}).get("token") == encoded:
                meta = secret["metadata"]
                annotations = meta.get("annotations") or {}
                account = self.store.get(SERVICEACCOUNTS.key, meta["namespace"], annotations.get(SA_NAME, ""))
                if account is None or account["metadata"]["uid"] != annotations.get(SA_UID):
                    return None
                namespace, name = meta["namespace"], account["metadata"]["name"]
                return User(f"system:serviceaccount:{namespace}:{name}",
                            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
                            namespace=namespace, account=name)
        return None

    # authorization ---------------------------------------------------------------------------------
    def allowed(self, user: User, verb: str, group: str, resource: str, namespace: str = "", name: str = "") -> bool:
        if user.admin:
            return True
        bindings = list(self.store.items(CLUSTERROLEBINDINGS.key))
        if namespace:
            bindings += [b for b in self.store.items(ROLEBINDINGS.key) if b["metadata"]["namespace"] == namespace]
        for binding in bindings:
            if not any(self._is(user, subject) for subject in binding.get("subjects") or ()):
                continue
            role = self._role(binding)
            if role is not None and any(_rule_allows(rule, verb, group, resource, name)
                                        for rule in role.get("rules") or ()):
                return True
        return False

    def authorize(self, user: User, verb: str, kind: Kind, namespace: str | None, name: str | None,
                  subresource: str = "") -> None:
        """403 as kube-apiserver words it, unless the user may."""
        resource = f"{kind.plural}/{subresource}" if subresource else kind.plural
        if self.allowed(user, verb, kind.group, resource, namespace or "", name or ""):
            return
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        reason = (f'User "{user.name}" cannot {verb} resource "{resource}" in API group "{kind.group}" {where}')
        qualified = kind.key
        message = f'{qualified} "{name}" is forbidden: {reason}' if name else f"{qualified} is forbidden: {reason}"
        details = {"group": kind.group, "kind": kind.plural, **({"name": name} if name else {})}
        raise ApiError(403, "Forbidden", message, details)

    def review(self, user: User, body: object) -> dict:
        """A SelfSubjectAccessReview answered from the same rules."""
        if not self.access_reviews:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        spec = body.get("spec") if isinstance(body, dict) else None
        attributes = (spec or {}).get("resourceAttributes") if isinstance(spec, dict) else None
        if not isinstance(attributes, dict) and not (isinstance(spec, dict) and spec.get("nonResourceAttributes")):
            raise ApiError(422, "Invalid", 'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: '
                           "spec.resourceAttributes: Invalid value: \"null\": exactly one of "
                           "nonResourceAttributes or resourceAttributes must be specified",
                           {"group": "authorization.k8s.io", "kind": "SelfSubjectAccessReview"})
        if isinstance(attributes, dict):
            resource = str(attributes.get("resource") or "")
            if attributes.get("subresource"):
                resource += f"/{attributes['subresource']}"
            allowed = self.allowed(user, str(attributes.get("verb") or ""), str(attributes.get("group") or ""),
                                   resource, str(attributes.get("namespace") or ""), str(attributes.get("name") or ""))
        else:
            allowed = True  # non-resource URLs: discovery and health, open to every authenticated user
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "metadata": {"creationTimestamp": None}, "spec": spec,
                "status": {"allowed": allowed, **({"reason": "RBAC: allowed"} if allowed and not user.admin else {})}}

    def _is(self, user: User, subject: dict) -> bool:
        kind = subject.get("kind")
        if kind == "ServiceAccount":
            return bool(user.account) and (subject.get("namespace"), subject.get("name")) == (user.namespace,
                                                                                               user.account)
        if kind == "User":
            return subject.get("name") == user.name
        return kind == "Group" and subject.get("name") in user.groups

    def _role(self, binding: dict) -> dict | None:
        ref = binding.get("roleRef") or {}
        if ref.get("kind") == "ClusterRole":
            return self.store.get(CLUSTERROLES.key, "", ref.get("name", ""))
        if ref.get("kind") == "Role" and binding["metadata"].get("namespace"):
            return self.store.get(ROLES.key, binding["metadata"]["namespace"], ref.get("name", ""))
        return None

    # the token controller ------------------------------------------------------------------------
    def _on_event(self, key: str, event) -> None:
        meta = event.obj["metadata"]
        if key == SECRETS.key and event.type != "DELETED" and event.obj.get("type") == SERVICE_ACCOUNT_TOKEN \
                and not (event.obj.get("data") or {}).get("token"):
            self.pending.add((meta["namespace"], meta["name"]))
        elif key == SERVICEACCOUNTS.key and event.type == "ADDED":
            self.pending.update((s["metadata"]["namespace"], s["metadata"]["name"])
                                for s in self._tokens_of(meta["namespace"], meta["name"]))
        elif key == SERVICEACCOUNTS.key and event.type == "DELETED":
            self._gone_accounts.add((meta["namespace"], meta["name"]))

    def needs_step(self) -> bool:
        return bool(self.pending or self._gone_accounts)

    def step(self) -> None:
        """Fill each waiting token Secret whose ServiceAccount exists; delete the tokens of deleted ones."""
        gone, self._gone_accounts = self._gone_accounts, set()
        for namespace, account in sorted(gone):
            if self.store.get(SERVICEACCOUNTS.key, namespace, account) is None:
                for secret in self._tokens_of(namespace, account):
                    self.cluster.delete_object(SECRETS, namespace, secret["metadata"]["name"], "Background")
        waiting, self.pending = self.pending, set()
        for namespace, name in sorted(waiting):
            secret = self.store.get(SECRETS.key, namespace, name)
            if secret is None or (secret.get("data") or {}).get("token"):
                continue
            annotations = secret["metadata"].get("annotations") or {}
            account = self.store.get(SERVICEACCOUNTS.key, namespace, annotations.get(SA_NAME, ""))
            if account is None:
                continue  # filled when the ServiceAccount appears
            data = {**(secret.get("data") or {}),
                    "token": base64.b64encode(secrets.token_urlsafe(32).encode()).decode(),
                    "namespace": base64.b64encode(namespace.encode()).decode()}
            meta = {**secret["metadata"], "annotations": {**annotations, SA_UID: account["metadata"]["uid"]}}
            self.cluster.write(SECRETS, {**secret, "metadata": meta, "data": data})

    def _tokens_of(self, namespace: str, account: str) -> list[dict]:
        return [s for s in self.store.items(SECRETS.key)
                if s["metadata"]["namespace"] == namespace and s.get("type") == SERVICE_ACCOUNT_TOKEN
                and (s["metadata"].get("annotations") or {}).get(SA_NAME) == account]
