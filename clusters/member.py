"""THE client of one member cluster: the official `kubernetes` package's typed APIs (CoreV1Api,
CustomObjectsApi, VersionApi, AuthorizationV1Api) over HTTP(S), with every failure turned into a
MemberError a person can act on, and every request paid from the member's RequestBudget.

Bodies are read as plain JSON dicts (`_preload_content=False`), not the package's model classes:
building model objects for thousands of nodes costs more than the whole network round trip, and
the inventory wants dicts.
"""

from __future__ import annotations

import contextlib
import json
import re
import ssl
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterator

import urllib3
from kubernetes.client import (ApiClient, ApisApi, AuthorizationV1Api, CoreV1Api, CustomObjectsApi,
                               RbacAuthorizationV1Api, V1DeleteOptions, V1Preconditions, V1ResourceAttributes,
                               V1SelfSubjectAccessReview, V1SelfSubjectAccessReviewSpec, VersionApi)
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from clusters.budget import BudgetExhausted, RequestBudget
from clusters.kubeconfig import KubeconfigPolicy, LoadedKubeconfig, load_kubeconfig

JOBSET_GROUP, JOBSET_VERSION = "jobset.x-k8s.io", "v1alpha2"
HYPERNODE_GROUP, HYPERNODE_VERSION = "topology.volcano.sh", "v1alpha1"
DRA_GROUP, DRA_VERSION = "resource.k8s.io", "v1"  # Dynamic Resource Allocation, GA in Kubernetes 1.34
# Pods that hold resources: not finished. Pending pods without a node hold nothing and are skipped later.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
PAGE = 500
APPLY = "application/apply-patch+yaml"
# A 429 is retried after its Retry-After this many times before the caller hears of it (client-go: 10).
THROTTLED_RETRIES = 3


@dataclass(frozen=True)
class Resource:
    """A kind the broker reads or writes on a member. Built-in kinds go through their typed API
    (`CoreV1Api.list_node`, `RbacAuthorizationV1Api.patch_cluster_role`: the package names those
    methods after the kind), custom ones through CustomObjectsApi."""

    group: str  # "" for the core API
    version: str
    plural: str
    kind: str
    namespaced: bool

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def snake(self) -> str:
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.kind).lower()


NODES = Resource("", "v1", "nodes", "Node", False)
PODS = Resource("", "v1", "pods", "Pod", True)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
JOBSETS = Resource(JOBSET_GROUP, JOBSET_VERSION, "jobsets", "JobSet", True)
HYPERNODES = Resource(HYPERNODE_GROUP, HYPERNODE_VERSION, "hypernodes", "HyperNode", False)
RESOURCESLICES = Resource(DRA_GROUP, DRA_VERSION, "resourceslices", "ResourceSlice", False)
DEVICECLASSES = Resource(DRA_GROUP, DRA_VERSION, "deviceclasses", "DeviceClass", False)
RESOURCECLAIMS = Resource(DRA_GROUP, DRA_VERSION, "resourceclaims", "ResourceClaim", True)
RESOURCECLAIMTEMPLATES = Resource(DRA_GROUP, DRA_VERSION, "resourceclaimtemplates", "ResourceClaimTemplate", True)
_BUILT_IN = {("", "v1"): CoreV1Api, ("rbac.authorization.k8s.io", "v1"): RbacAuthorizationV1Api}


class MemberError(Exception):
    """A member did not answer as needed. `reason`: Unreachable (refused, DNS, reset), Timeout, TLS,
    Unauthorized, Forbidden, NotFound, Gone, Throttled (429, or its Retry-After outlasts the
    timeout), ServerError or BadResponse. The message never holds a credential."""

    def __init__(self, reason: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.reason, self.status = reason, status


@dataclass(frozen=True)
class MemberFacts:
    """What registration and the health probe learn about a member."""

    version: str
    jobset_crd: bool
    hypernode_crd: bool
    dra: bool = False  # serves resource.k8s.io/v1 (Kubernetes 1.34 and later)


class MemberClient:
    """One member cluster's API. Thread-safe: the urllib3 pool and the request budget are shared by
    the sync, the watches, the status watch, the dispatcher's lane and the health probe of that member."""

    def __init__(self, loaded: LoadedKubeconfig, timeout: float = 5.0, budget: RequestBudget | None = None) -> None:
        self._loaded = loaded
        self.timeout = timeout
        self.budget = budget or RequestBudget(None, 1)
        # kept connections: a list, three inventory watches, the status watch, a probe, the dispatcher's lane
        loaded.configuration.connection_pool_maxsize = 16
        self._api = ApiClient(loaded.configuration)
        self._api.user_agent = "archipelago"
        self._custom = CustomObjectsApi(self._api)
        self._built_in = {key: api(self._api) for key, api in _BUILT_IN.items()}
        self._version, self._authorization = VersionApi(self._api), AuthorizationV1Api(self._api)
        self._apis = ApisApi(self._api)
        # Called right before each request goes out (after any wait for the budget or a Retry-After): the broker's
        # loop services raise there once their replica may have lost the lease they act under.
        self.guard: Callable[[], None] = lambda: None

    @classmethod
    def from_kubeconfig(cls, text: str, context: str | None = None, *, policy: KubeconfigPolicy = KubeconfigPolicy(),
                        timeout: float = 5.0, budget: RequestBudget | None = None) -> MemberClient:
        return cls(load_kubeconfig(text, context, policy), timeout, budget)

    @property
    def api_server(self) -> str:
        return self._loaded.server

    @property
    def context(self) -> str:
        return self._loaded.context

    def close(self) -> None:
        self._api.close()
        self._loaded.close()

    # requests ------------------------------------------------------------------------------------
    def _call(self, what: str, method: Callable[..., Any], *args: Any, timeout: float | tuple[float, float] | None = None,
              **params: Any) -> urllib3.BaseHTTPResponse:
        """One request through a typed API method, its body left undecoded; MemberError on failure. A 429
        is retried after its Retry-After, during which nothing at all goes to the member (RequestBudget)."""
        params = {k: v for k, v in params.items() if v is not None}
        throttled = 0
        while True:
            try:
                self.budget.take(self.timeout)
            except BudgetExhausted as exc:
                raise MemberError("Throttled", f"{what}: {self.api_server} asked for no requests for {exc.wait:.0f} s "
                                  "more (429 Retry-After)" if exc.throttled else
                                  f"{what}: the broker's request budget for {self.api_server} (ARCHIPELAGO_MEMBER_QPS)"
                                  f" is spent for {exc.wait:.1f} s", 429) from None
            self.guard()
            try:
                return method(*args, _preload_content=False, _request_timeout=timeout or self.timeout, **params)
            except ApiException as exc:
                if exc.status == 429:
                    self.budget.hold(_retry_after(exc.headers))
                    throttled += 1
                    if throttled <= THROTTLED_RETRIES:
                        continue
                raise _api_error(self.api_server, what, exc) from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise _transport_error(self.api_server, exc) from None

    def _json(self, what: str, response: urllib3.BaseHTTPResponse) -> dict:
        try:
            return json.loads(response.data)
        except ValueError:
            raise MemberError("BadResponse", f"{what}: {self.api_server} did not answer JSON") from None

    def _typed(self, resource: Resource) -> Any:
        """The typed API of a built-in kind; None for a custom resource."""
        return self._built_in.get((resource.group, resource.version))

    def _lister(self, resource: Resource, namespace: str | None) -> Callable[..., Any]:
        api = self._typed(resource)
        if api is None:
            if namespace:
                return partial(self._custom.list_namespaced_custom_object, resource.group, resource.version,
                               namespace, resource.plural)
            return partial(self._custom.list_cluster_custom_object, resource.group, resource.version, resource.plural)
        if namespace:
            return partial(getattr(api, f"list_namespaced_{resource.snake}"), namespace)
        return getattr(api, f"list_{resource.snake}_for_all_namespaces" if resource.namespaced else
                       f"list_{resource.snake}")

    def _addressed(self, verb: str, resource: Resource, name: str, namespace: str | None) -> Callable[..., Any]:
        """The typed method that `verb`s one object (read, patch, delete), its address bound."""
        api = self._typed(resource)
        if api is None:
            where = (resource.group, resource.version) + ((namespace,) if resource.namespaced else ())
            scope = "namespaced" if resource.namespaced else "cluster"
            method = getattr(self._custom, f"{'get' if verb == 'read' else verb}_{scope}_custom_object")
            return partial(method, *where, resource.plural, name)
        if resource.namespaced:
            return partial(getattr(api, f"{verb}_namespaced_{resource.snake}"), name, namespace)
        return partial(getattr(api, f"{verb}_{resource.snake}"), name)

    def list(self, resource: Resource, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, from_cache: bool = False) -> tuple[list[dict], str]:
        """All items of a collection, page by page; and the resourceVersion to watch from.

        `from_cache`: resourceVersion=0, served from the API server's watch cache rather than a quorum
        read of etcd — right for a relist that a watch from its resourceVersion then keeps fresh (an
        API server may then answer in one page whatever the limit)."""
        lister, what = self._lister(resource, namespace), f"list {resource}"
        items: list[dict] = []
        token = None
        while True:
            page = self._json(what, self._call(what, lister, label_selector=label_selector,
                                               field_selector=field_selector, limit=PAGE, _continue=token,
                                               resource_version="0" if from_cache and token is None else None))
            items.extend(page.get("items") or ())
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                return items, str(metadata.get("resourceVersion") or "")

    def watch(self, resource: Resource, resource_version: str, *, label_selector: str | None = None,
              field_selector: str | None = None, timeout_seconds: int = 300) -> WatchStream:
        """Watch events ({type, object}) after `resource_version` until the server ends the stream.

        BOOKMARK events are asked for and yielded (they carry the resourceVersion to resume from); an
        ERROR event raises MemberError (Gone when the version is too old and a relist is needed).
        """
        what = f"watch {resource}"
        # a read timeout longer than the server's own end of stream: silence means a dead member
        response = self._call(what, self._lister(resource, None), label_selector=label_selector,
                              field_selector=field_selector, watch=True, resource_version=resource_version,
                              allow_watch_bookmarks=True, timeout_seconds=timeout_seconds,
                              timeout=(self.timeout, timeout_seconds + self.timeout))
        return WatchStream(self.api_server, str(resource), response)

    def read(self, resource: Resource, name: str, namespace: str | None = None) -> dict:
        what = f"get {resource} {namespace + '/' if namespace else ''}{name}"
        return self._json(what, self._call(what, self._addressed("read", resource, name, namespace)))

    def create(self, resource: Resource, body: dict) -> dict:
        """Create one object: 409 AlreadyExists where the name is taken (an apply would take over whatever holds
        it)."""
        meta = body["metadata"]
        what = f"create {resource} {meta.get('namespace', '') and meta['namespace'] + '/'}{meta['name']}"
        api = self._typed(resource)
        if api is None:
            where = (resource.group, resource.version) + ((meta["namespace"],) if resource.namespaced else ())
            method = partial(getattr(self._custom, f"create_{'namespaced' if resource.namespaced else 'cluster'}"
                                                   "_custom_object"), *where, resource.plural)
        else:
            method = (partial(getattr(api, f"create_namespaced_{resource.snake}"), meta["namespace"])
                      if resource.namespaced else getattr(api, f"create_{resource.snake}"))
        return self._json(what, self._call(what, method, body=body))

    def apply(self, resource: Resource, body: dict, field_manager: str, *, dry_run: bool = False) -> dict:
        """Server-side apply with force: the field manager owns the fields it sets, whoever touched them since.
        `dry_run`: validated and admitted as it would be (its admission webhooks and policies asked), nothing stored."""
        meta = body["metadata"]
        what = (f"{'dry-run ' if dry_run else ''}apply {resource} "
                f"{meta.get('namespace', '') and meta['namespace'] + '/'}{meta['name']}")
        method = self._addressed("patch", resource, meta["name"], meta.get("namespace"))
        extra = {"dry_run": "All"} if dry_run else {}
        return self._json(what, self._call(what, method, body=body, field_manager=field_manager, force=True,
                                           _content_type=APPLY, **extra))

    def apply_status(self, resource: Resource, body: dict, field_manager: str) -> dict:
        """Server-side apply of a custom object's status subresource (its fields only)."""
        meta = body["metadata"]
        what = f"apply {resource} {meta['name']} status"
        where = (resource.group, resource.version) + ((meta["namespace"],) if resource.namespaced else ())
        scope = "namespaced" if resource.namespaced else "cluster"
        method = partial(getattr(self._custom, f"patch_{scope}_custom_object_status"), *where, resource.plural,
                         meta["name"])
        return self._json(what, self._call(what, method, body=body, field_manager=field_manager, force=True,
                                           _content_type=APPLY))

    def delete(self, resource: Resource, name: str, namespace: str | None = None, *,
               propagation: str | None = None, uid: str | None = None) -> None:
        """Delete one object; `uid`: only if it is still that object (else 409 Conflict)."""
        options = V1DeleteOptions(propagation_policy=propagation,
                                  preconditions=V1Preconditions(uid=uid) if uid else None)
        what = f"delete {resource} {namespace + '/' if namespace else ''}{name}"
        self._call(what, self._addressed("delete", resource, name, namespace), body=options).drain_conn()

    # what the broker asks of every member --------------------------------------------------------
    def version(self) -> str:
        info = self._json("get version", self._call("get version", self._version.get_code))
        return str(info.get("gitVersion") or "unknown")

    def serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the API serves `plural` in group/version (discovery, readable by any identity)."""
        what = f"discover {group}/{version}"
        try:
            resources = self._json(what, self._call(what, self._custom.get_api_resources, group, version))
        except MemberError as exc:
            if exc.reason == "NotFound":
                return False
            raise
        return any(r.get("name") == plural for r in resources.get("resources") or ())

    def group_versions(self) -> set[str]:
        """Every group/version the API serves beyond the core one: one discovery request (`GET /apis`)."""
        groups = self._json("discover /apis", self._call("discover /apis", self._apis.get_api_versions))
        return {v.get("groupVersion") for g in groups.get("groups") or () for v in g.get("versions") or ()}

    def may(self, verb: str, group: str, resource: str, namespace: str | None = None) -> bool | None:
        """A SelfSubjectAccessReview; None where the member has no such API."""
        resource, _, subresource = resource.partition("/")  # hypernodes/status: a subresource
        review = V1SelfSubjectAccessReview(spec=V1SelfSubjectAccessReviewSpec(resource_attributes=V1ResourceAttributes(
            verb=verb, group=group, resource=resource, subresource=subresource or None, namespace=namespace)))
        what = f"review access to {verb} {resource}"
        try:
            answer = self._json(what, self._call(what, self._authorization.create_self_subject_access_review, review))
        except MemberError as exc:
            if exc.reason == "NotFound":
                return None
            raise
        return bool((answer.get("status") or {}).get("allowed"))

    def cluster_uid(self) -> str | None:
        """The member's own identity, whatever URL reaches it: the uid of its kube-system namespace (Karmada's
        cluster ID); None for a member without one."""
        try:
            return (self.read(NAMESPACES, "kube-system").get("metadata") or {}).get("uid") or None
        except MemberError as exc:
            if exc.reason == "NotFound":
                return None
            raise

    def facts(self) -> MemberFacts:
        version = self.version()
        return MemberFacts(version=version, jobset_crd=self.serves(JOBSET_GROUP, JOBSET_VERSION, "jobsets"),
                           hypernode_crd=self.serves(HYPERNODE_GROUP, HYPERNODE_VERSION, "hypernodes"),
                           dra=self.serves(DRA_GROUP, DRA_VERSION, "resourceslices"))


_TLS_MARKERS = re.compile(r"(certificate verify failed[^(')\"]*|hostname mismatch[^(')\"]*|"
                          r"wrong version number|tlsv1 alert [a-z ]+|sslv3 alert [a-z ]+)", re.IGNORECASE)


class WatchStream:
    """An open watch; iterate for events, `close()` from any thread to end it at once."""

    def __init__(self, server: str, what: str, response: urllib3.BaseHTTPResponse) -> None:
        self._server, self._what, self._response = server, what, response

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # RuntimeError: the stream has ended already
            self._response.shutdown()  # unblocks a read in progress in another thread

    def __iter__(self) -> Iterator[dict]:
        try:
            for line in iter_resp_lines(self._response):
                if not line:
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    code = status.get("code")
                    raise MemberError("Gone" if code == 410 else "ServerError",
                                      f"watch of {self._what} on {self._server} ended: {status.get('message')}", code)
                yield event
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _transport_error(self._server, exc) from None
        finally:
            self._response.release_conn()


def _retry_after(headers: Any) -> float:
    """Seconds from a Retry-After header (the API server sends whole seconds); 1 s when absent or unreadable."""
    try:
        return max(float((headers or {}).get("Retry-After")), 0.0)
    except (TypeError, ValueError):
        return 1.0


def _tls_reason(text: str) -> str:
    """The OpenSSL reason out of urllib3's nested wrappers, e.g. `certificate verify failed: self-signed ...`."""
    found = _TLS_MARKERS.search(text)
    return found.group(1).strip() if found else text.strip().splitlines()[-1][:300]


def _api_error(server: str, what: str, exc: ApiException) -> MemberError:
    """The package's REST layer raises ApiException for an HTTP error status, and with status 0 for a
    TLS failure (urllib3's SSLError) or a request it could not build."""
    if exc.status:
        return _status_error(server, what, exc.status, exc.body)
    if str(exc.reason or "").startswith("SSLError"):
        return MemberError("TLS", f"TLS handshake with {server} failed: {_tls_reason(str(exc.reason))}")
    return MemberError("BadResponse", f"{what}: {server}: {str(exc.reason or '').strip()[:300]}")


def _transport_error(server: str, exc: Exception) -> MemberError:
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason  # one attempt only (clusters.kubeconfig): the failure it wraps is the one to tell
    if isinstance(exc, (urllib3.exceptions.SSLError, ssl.SSLError)):
        return MemberError("TLS", f"TLS handshake with {server} failed: {_tls_reason(str(exc))}")
    if isinstance(exc, urllib3.exceptions.TimeoutError) and not isinstance(exc, urllib3.exceptions.NewConnectionError):
        return MemberError("Timeout", f"{server} did not answer in time ({type(exc).__name__})")
    reason = exc
    while getattr(reason, "reason", None) is not None and isinstance(reason.reason, Exception):
        reason = reason.reason
    while isinstance(reason, urllib3.exceptions.ProtocolError) and reason.args[1:] and \
            isinstance(reason.args[1], Exception):
        reason = reason.args[1]
    detail = str(reason)
    if isinstance(reason, urllib3.exceptions.NewConnectionError):
        detail = detail.split(": ", 1)[-1]  # drop the connection object's repr
    return MemberError("Unreachable", f"cannot reach {server}: {detail or type(reason).__name__}")


def _status_error(server: str, what: str, status: int, data: bytes | str | None) -> MemberError:
    try:
        status_object = json.loads(data)
        message, said_reason = status_object.get("message") or "", status_object.get("reason")
    except (TypeError, ValueError, AttributeError):
        message, said_reason = "", None
    reason = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 410: "Gone", 429: "Throttled"}.get(
        status, "ServerError" if status >= 500 else "BadResponse")
    if status == 409:  # a name taken (AlreadyExists), or an object changed since it was read (Conflict)
        reason = "AlreadyExists" if said_reason == "AlreadyExists" else "Conflict"
    said = {401: "rejected the credentials (401 Unauthorized)", 403: "forbids it (403 Forbidden)",
            429: "is overloaded (429 Too Many Requests)"}.get(status, f"answered {status}")
    return MemberError(reason, f"{what}: {server} {said}{': ' + message if message else ''}", status)
