"""THE client of one member cluster: the official `kubernetes` package (its Configuration, auth
and urllib3 pool) over HTTP(S), with every failure turned into a MemberError a person can act on.

Bodies are read as plain JSON dicts, not the package's model classes: building model objects for
thousands of nodes costs more than the whole network round trip, and the inventory wants dicts.
"""

from __future__ import annotations

import json
import re
import ssl
from dataclasses import dataclass
from typing import Any, Iterator

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from clusters.kubeconfig import KubeconfigPolicy, LoadedKubeconfig, load_kubeconfig

JOBSET_GROUP, JOBSET_VERSION = "jobset.x-k8s.io", "v1alpha2"
HYPERNODE_GROUP, HYPERNODE_VERSION = "topology.volcano.sh", "v1alpha1"
NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"
HYPERNODES = f"/apis/{HYPERNODE_GROUP}/{HYPERNODE_VERSION}/hypernodes"
# Pods that hold resources: not finished. Pending pods without a node hold nothing and are skipped later.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
PAGE = 500


class MemberError(Exception):
    """A member did not answer as needed. `reason`: Unreachable, Timeout, TLS, Unauthorized,
    Forbidden, NotFound, Gone, ServerError or BadResponse. The message never holds a credential."""

    def __init__(self, reason: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.reason, self.status = reason, status


@dataclass(frozen=True)
class MemberFacts:
    """What registration and the health probe learn about a member."""

    version: str
    jobset_crd: bool
    hypernode_crd: bool


class MemberClient:
    """One member cluster's API. Thread-safe: the urllib3 pool is shared by the sync, the watches
    and the health probe of that member."""

    def __init__(self, loaded: LoadedKubeconfig, timeout: float = 5.0) -> None:
        self._loaded = loaded
        self.timeout = timeout
        # kept connections: a list, three inventory watches, the status watch, a probe, the dispatcher's lane
        loaded.configuration.connection_pool_maxsize = 16
        self._api = ApiClient(loaded.configuration)
        self._api.user_agent = "archipelago"

    @classmethod
    def from_kubeconfig(cls, text: str, context: str | None = None, *,
                        policy: KubeconfigPolicy = KubeconfigPolicy(), timeout: float = 5.0) -> MemberClient:
        return cls(load_kubeconfig(text, context, policy), timeout)

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
    def _send(self, method: str, path: str, query: dict | None = None, body: Any = None,
              timeout: float | tuple[float, float] | None = None,
              content_type: str = "application/json") -> urllib3.BaseHTTPResponse:
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self._api.param_serialize(method, path, query_params=params, header_params=headers, body=body,
                                            auth_settings=["BearerToken"])
        try:
            response = self._api.call_api(*request, _request_timeout=timeout or self.timeout).response
        except ApiException as exc:  # the REST layer wraps TLS failures
            raise MemberError("TLS", f"TLS handshake with {self.api_server} failed: "
                                     f"{_tls_reason(str(exc.reason))}") from None
        except urllib3.exceptions.HTTPError as exc:
            raise _transport_error(self.api_server, exc) from None
        if response.status >= 400:
            data = response.data
            response.release_conn()
            raise _status_error(self.api_server, method, path, response.status, data)
        return response

    def request(self, method: str, path: str, query: dict | None = None, body: Any = None,
                content_type: str = "application/json") -> dict:
        """One call; the decoded JSON body. Raises MemberError."""
        response = self._send(method, path, query, body, content_type=content_type)
        try:
            return json.loads(response.data)
        except ValueError:
            raise MemberError("BadResponse", f"{self.api_server}{path} did not answer JSON") from None

    def get(self, path: str, query: dict | None = None) -> dict:
        return self.request("GET", path, query)

    def patch(self, path: str, body: Any, content_type: str = "application/merge-patch+json") -> dict:
        return self.request("PATCH", path, body=body, content_type=content_type)

    def list(self, path: str, query: dict | None = None) -> tuple[list[dict], str]:
        """All items of a collection, page by page; and the resourceVersion to watch from."""
        items: list[dict] = []
        token = None
        while True:
            page = self.get(path, {**(query or {}), "limit": PAGE, "continue": token})
            items.extend(page.get("items") or ())
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                return items, str(metadata.get("resourceVersion") or "")

    def watch(self, path: str, resource_version: str, query: dict | None = None,
              timeout_seconds: int = 300) -> WatchStream:
        """Watch events ({type, object}) after `resource_version` until the server ends the stream.

        BOOKMARK events are yielded too (they carry the resourceVersion to resume from); an ERROR
        event raises MemberError (Gone when the version is too old and a relist is needed).
        """
        params = {**(query or {}), "watch": "true", "resourceVersion": resource_version,
                  "allowWatchBookmarks": "true", "timeoutSeconds": timeout_seconds}
        # a read timeout longer than the server's own end of stream: silence means a dead member
        response = self._send("GET", path, params, timeout=(self.timeout, timeout_seconds + self.timeout))
        return WatchStream(self.api_server, path, response)

    # what the broker asks of every member --------------------------------------------------------
    def version(self) -> str:
        return str(self.get("/version").get("gitVersion") or "unknown")

    def serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the API serves `plural` in group/version (discovery, readable by any identity)."""
        try:
            resources = self.get(f"/apis/{group}/{version}").get("resources") or ()
        except MemberError as exc:
            if exc.reason == "NotFound":
                return False
            raise
        return any(r.get("name") == plural for r in resources)

    def may(self, verb: str, group: str, resource: str, namespace: str | None = None) -> bool | None:
        """A SelfSubjectAccessReview; None where the member has no such API."""
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                  "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                                                  "namespace": namespace}}}
        try:
            answer = self.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=review)
        except MemberError as exc:
            if exc.reason == "NotFound":
                return None
            raise
        return bool((answer.get("status") or {}).get("allowed"))

    def facts(self) -> MemberFacts:
        version = self.version()
        return MemberFacts(version=version, jobset_crd=self.serves(JOBSET_GROUP, JOBSET_VERSION, "jobsets"),
                           hypernode_crd=self.serves(HYPERNODE_GROUP, HYPERNODE_VERSION, "hypernodes"))


_TLS_MARKERS = re.compile(r"(certificate verify failed[^(')\"]*|hostname mismatch[^(')\"]*|"
                          r"wrong version number|tlsv1 alert [a-z ]+|sslv3 alert [a-z ]+)", re.IGNORECASE)


class WatchStream:
    """An open watch; iterate for events, `close()` from any thread to end it at once."""

    def __init__(self, server: str, path: str, response: urllib3.BaseHTTPResponse) -> None:
        self._server, self._path, self._response = server, path, response

    def close(self) -> None:
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
                                      f"watch of {self._path} on {self._server} ended: {status.get('message')}", code)
                yield event
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _transport_error(self._server, exc) from None
        finally:
            self._response.release_conn()


def _tls_reason(text: str) -> str:
    """The OpenSSL reason out of urllib3's nested wrappers, e.g. `certificate verify failed: self-signed ...`."""
    found = _TLS_MARKERS.search(text)
    return found.group(1).strip() if found else text.strip().splitlines()[-1][:300]


def _transport_error(server: str, exc: Exception) -> MemberError:
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


def _status_error(server: str, method: str, path: str, status: int, data: bytes) -> MemberError:
    try:
        message = json.loads(data).get("message") or ""
    except (ValueError, AttributeError):
        message = ""
    reason = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 410: "Gone"}.get(
        status, "ServerError" if status >= 500 else "BadResponse")
    what = {401: "rejected the credentials (401 Unauthorized)",
            403: "forbids it (403 Forbidden)"}.get(status, f"answered {status}")
    return MemberError(reason, f"{method} {path}: {server} {what}{': ' + message if message else ''}", status)
