"""The ASGI application serving every simulated cluster under `/clusters/<name>`, its controller
ticker and its fault switches.

Unreachable clusters: one server cannot refuse TCP connections per URL path, so the HTTP protocol
(`protocol_class`) closes the connection as soon as it sees a request line for such a cluster,
before any response byte: clients see a dropped connection ("connection reset"/"remote end closed").
"""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import json
import secrets
import socket
import threading
import time
from typing import Iterable

import yaml
from uvicorn.protocols.http.h11_impl import H11Protocol

from clusters.sim.clock import SimClock, rfc3339
from clusters.sim.cluster import SimCluster
from clusters.sim.rbac import REVIEW_PATH, User, request_verb
from clusters.sim.resources import NAMESPACES, Kind
from clusters.sim.scenario import ClusterSpec
from clusters.sim.store import ApiError, dumps
from clusters.sim.traffic import Traffic, list_limit, parse_query
from clusters.sim.watch import Watches, _WatchStream

_PATCH_TYPES = {"application/json-patch+json": "json", "application/merge-patch+json": "merge",
                "application/strategic-merge-patch+json": "strategic", "application/apply-patch+yaml": "apply"}
_HEALTH = ("healthz", "livez", "readyz")


class SimApp(Watches):
    def __init__(self, specs: Iterable[ClusterSpec], clock: SimClock, admin_token: str | None = None) -> None:
        self.clock = clock
        self.admin_token = admin_token or secrets.token_urlsafe(24)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tick = None
        self._wake_event: asyncio.Event | None = None
        self._wake_pending = False
        self.clusters: dict[str, SimCluster] = {}
        for spec in specs:
            self.clusters[spec.name] = SimCluster(spec, clock, self.wake)
        # another address of the same cluster: a second load balancer or DNS name in front of one API server
        self.aliases = {alias: spec.name for spec in specs for alias in spec.aliases}
        self.streams: dict[str, set[_WatchStream]] = {name: set() for name in self.clusters}
        self.traffic = {name: Traffic() for name in self.clusters}
        self._slowed: dict[str, asyncio.Event] = {}
        self.started = threading.Event()
        self.stopping = False

    # time and controllers ------------------------------------------------------------------------
    def wake(self) -> None:
        if self.loop is None or self._wake_pending:
            return
        self._wake_pending = True
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._wake_event.set()
        else:
            self.loop.call_soon_threadsafe(self._wake_event.set)

    def step_all(self) -> None:
        now = self.clock.now()
        for cluster in self.clusters.values():
            with cluster.lock:  # also waits for a step another thread is in the middle of
                if cluster.controller.needs_step(now):
                    cluster.controller.step(now)

    def advance(self, seconds: float) -> None:
        """Move simulated time forward and let every controller catch up before returning."""
        self.clock.advance(seconds)
        self.step_all()

    async def _ticker(self) -> None:
        while not self.stopping:
            self._wake_event.clear()
            self._wake_pending = False
            self.step_all()
            due = min((d for d in (c.controller.next_due() for c in self.clusters.values()) if d is not None),
                      default=None)
            delay = 1.0
            if due is not None:
                real = self.clock.real_delay(due - self.clock.now())
                if real is not None:
                    delay = min(delay, real)
            try:
                await asyncio.wait_for(self._wake_event.wait(), timeout=max(delay, 0.001))
            except asyncio.TimeoutError:
                pass

    # faults ----------------------------------------------------------------------------------------
    def set_fault(self, name: str, mode: str | None, seconds: float = 0.0, status: int = 503) -> None:
        cluster = self.clusters[name]
        if mode not in (None, "unreachable", "slow", "failing"):
            raise ValueError(f"unknown fault {mode!r}")
        cluster.fault, cluster.latency, cluster.fail_status = mode, seconds, status
        if mode == "unreachable":
            self.close_streams(name)
        release = self._slowed.pop(name, None)  # requests held back by "slow" go on at once
        if release is not None:
            self.loop.call_soon_threadsafe(release.set)

    def close_streams(self, name: str | None = None) -> None:
        for cluster_name, streams in self.streams.items():
            if name is None or cluster_name == name:
                for stream in list(streams):
                    stream.close()

    def unreachable(self, request_line: bytes) -> bool:
        """Whether a raw request line targets an unreachable cluster (checked by the protocol)."""
        parts = request_line.split(b" ")
        if len(parts) != 3 or not parts[1].startswith(b"/clusters/"):
            return False
        name = parts[1].split(b"/")[2].split(b"?")[0].decode(errors="replace")
        cluster = self.clusters.get(self.aliases.get(name, name))
        return cluster is not None and cluster.fault == "unreachable"

    # ASGI ----------------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.loop = asyncio.get_running_loop()
                self._wake_event = asyncio.Event()
                self._tick = asyncio.create_task(self._ticker())
                self.started.set()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.stopping = True
                self.close_streams()
                if self._tick is not None:
                    self._wake_event.set()
                    await self._tick
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _body(self, receive) -> bytes:
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        return b"".join(chunks)

    async def _respond(self, send, code: int, payload, content_type: bytes = b"application/json",
                       headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        body = payload if isinstance(payload, bytes) else dumps(payload)
        await send({"type": "http.response.start", "status": code,
                    "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                                (b"cache-control", b"no-cache, private"), *headers]})
        await send({"type": "http.response.body", "body": body})

    async def _http(self, scope, receive, send) -> None:
        path = scope["path"]
        headers = {k.decode().lower(): v.decode(errors="replace") for k, v in scope["headers"]}
        query = parse_query(scope.get("query_string", b""))
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "clusters":
            parts[1] = self.aliases.get(parts[1], parts[1])
        try:
            if parts[:1] == ["admin"]:
                body = await self._body(receive)
                await self._respond(send, 200, self._admin(parts[1:], scope["method"], headers, body))
                return
            if len(parts) < 2 or parts[0] != "clusters" or parts[1] not in self.clusters:
                if parts in (["healthz"], ["readyz"], ["livez"]):
                    await self._respond(send, 200, b"ok", b"text/plain")
                    return
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            cluster = self.clusters[parts[1]]
            retry_after = self.traffic[cluster.name].arrive(scope["method"], "/" + "/".join(parts[2:]), query)
            if retry_after is not None:
                await self._respond(send, 429, ApiError(429, "TooManyRequests", "too many requests (simulated), "
                                                        "please try again later").status(),
                                    headers=((b"retry-after", str(retry_after).encode()),))
                return
            if cluster.fault == "unreachable":
                raise ApiError(503, "ServiceUnavailable", "cluster unreachable (simulated)")
            if cluster.fault == "slow" and cluster.latency > 0:
                release = self._slowed.setdefault(cluster.name, asyncio.Event())
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(release.wait(), cluster.latency)
            if cluster.fault == "failing":
                reason = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests"}.get(
                    cluster.fail_status, "InternalError")
                raise ApiError(cluster.fail_status, reason, "simulated failure")
            rest = parts[2:]
            if rest[:1] and rest[0] in _HEALTH and len(rest) == 1:
                await self._respond(send, 200, b"ok", b"text/plain")
                return
            user = cluster.rbac.authenticate(headers.get("authorization", ""))
            if user is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            body = await self._body(receive)
            await self._serve(cluster, user, rest, scope["method"], headers, query, body, send)
        except ApiError as err:
            await self._respond(send, err.code, err.status())

    def _admin(self, parts: list[str], method: str, headers: dict, body: bytes) -> dict:
        """`GET /admin/clusters`, `POST /admin/clusters/<name>/fault {mode, seconds, status}`,
        `POST /admin/clusters/<name>/throttle {retry_after, seconds}` (429s), `POST /admin/advance {seconds}`,
        `POST /admin/requests {since}` (each cluster's requests since that time.monotonic()); bearer admin token."""
        if headers.get("authorization", "") != f"Bearer {self.admin_token}":
            raise ApiError(401, "Unauthorized", "Unauthorized")
        data = json.loads(body or b"{}") if method == "POST" else {}
        if parts == ["clusters"] and method == "GET":
            return {"clusters": [{"name": c.name, "labels": c.labels, "fault": c.fault, "latency": c.latency}
                                 for c in self.clusters.values()]}
        if len(parts) == 3 and parts[0] == "clusters" and parts[2] == "fault" and method == "POST":
            if parts[1] not in self.clusters:
                raise ApiError(404, "NotFound", f"cluster {parts[1]} not found")
            mode = data.get("mode")
            try:
                self.set_fault(parts[1], None if mode in (None, "healthy") else mode,
                               float(data.get("seconds", 0)), int(data.get("status", 503)))
            except ValueError as exc:
                raise ApiError(400, "BadRequest", str(exc)) from exc
            return {"name": parts[1], "fault": self.clusters[parts[1]].fault}
        if len(parts) == 3 and parts[0] == "clusters" and parts[2] == "throttle" and method == "POST":
            if parts[1] not in self.clusters:
                raise ApiError(404, "NotFound", f"cluster {parts[1]} not found")
            self.traffic[parts[1]].throttle(int(data.get("retry_after", 1)), float(data.get("seconds", 0)))
            return {"name": parts[1]}
        if parts == ["requests"] and method == "POST":
            since = float(data.get("since", 0))
            return {"clusters": {name: [[r.at, r.method, r.path, r.query, r.throttled] for r in traffic.requests()
                                        if r.at >= since] for name, traffic in self.traffic.items()}}
        if parts == ["advance"] and method == "POST":
            self.advance(float(data.get("seconds", 0)))
            return {"now": rfc3339(self.clock.now())}
        raise ApiError(404, "NotFound", "unknown admin endpoint")

    # Kubernetes API --------------------------------------------------------------------------------
    async def _serve(self, cluster: SimCluster, user: User, rest: list[str], method: str, headers: dict,
                     query: dict, body: bytes, send) -> None:
        catalog = cluster.catalog
        if rest == REVIEW_PATH and method == "POST":
            review = _decode(body, headers)
            with cluster.lock:
                data = dumps(cluster.rbac.review(user, review))
            await self._respond(send, 201, data)
            return
        if rest == ["version"]:
            major, minor = cluster.version.lstrip("v").split(".")[:2]
            await self._respond(send, 200, {"major": major, "minor": minor, "gitVersion": cluster.version,
                                            "gitCommit": "archipelago-sim", "gitTreeState": "clean",
                                            "buildDate": "2024-01-01T00:00:00Z", "goVersion": "go1.22.0",
                                            "compiler": "gc", "platform": "linux/amd64"})
            return
        discovery = None
        if rest == ["api"]:
            discovery = catalog.api_versions()
        elif rest == ["api", "v1"]:
            discovery = catalog.resource_list("", "v1")
        elif rest == ["apis"]:
            discovery = catalog.group_list()
        elif len(rest) == 2 and rest[0] == "apis":
            discovery = catalog.group(rest[1])
        elif len(rest) == 3 and rest[0] == "apis":
            discovery = catalog.resource_list(rest[1], rest[2])
        if discovery is not None or (rest[:1] == ["api"] and len(rest) <= 2) or (rest[:1] == ["apis"] and len(rest) <= 3):
            if discovery is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            await self._respond(send, 200, discovery)
            return
        if rest[:2] == ["api", "v1"]:
            group, version, tail = "", "v1", rest[2:]
        elif rest[:1] == ["apis"] and len(rest) >= 3:
            group, version, tail = rest[1], rest[2], rest[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace, name, sub = None, None, ""
        if len(tail) >= 3 and tail[0] == "namespaces" and tail[2] not in ("status", "finalize"):
            namespace, tail = tail[1], tail[2:]
        plural = tail[0] if tail else ""
        if len(tail) >= 2:
            name = tail[1]
        if len(tail) == 3:
            sub = tail[2]
        if len(tail) > 3 or not plural:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        kind = catalog.lookup(group, version, plural)
        if kind is None or (sub and sub != "status") or (namespace is not None and not kind.namespaced):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub == "status" and not kind.status_subresource:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns = namespace or ""
        watch = method == "GET" and query.get("watch") in ("1", "true")
        with cluster.lock:
            cluster.rbac.authorize(user, request_verb(method, name is not None, watch), kind,
                                   name if kind is NAMESPACES and name else namespace, name, sub)
        manager = query.get("fieldManager") or headers.get("user-agent", "unknown").split("/")[0] or "unknown"
        dry_run = "dryRun" in query
        table = "as=Table" in headers.get("accept", "")
        if name is None:
            if watch:
                await self._watch(cluster, kind, namespace, query, send)
                return
            if method == "GET":
                limit = list_limit(query)
                with cluster.lock:
                    items, rv, token, remaining = cluster.list(kind, namespace, query.get("labelSelector"),
                                                               query.get("fieldSelector"), limit, query.get("continue"))
                    meta = {"resourceVersion": rv}
                    if token:
                        meta["continue"] = token
                        meta["remainingItemCount"] = remaining
                    payload = self._table(cluster, kind, items, meta) if table else \
                        {"apiVersion": kind.api_version, "kind": kind.kind + "List", "metadata": meta, "items": items}
                    data = dumps(payload)
                await self._respond(send, 200, data)
                return
            if method == "POST":
                obj = _decode(body, headers)
                with cluster.lock:
                    created = cluster.create(kind, ns, obj, manager, dry_run)
                    data = dumps(created)
                await self._respond(send, 201, data)
                return
            if method == "DELETE":
                options = _decode(body, headers) if body else {}
                with cluster.lock:
                    items = cluster.list(kind, namespace, query.get("labelSelector"), query.get("fieldSelector"))[0]
                    for item in items:
                        cluster.delete(kind, item["metadata"].get("namespace") or "", item["metadata"]["name"],
                                       query.get("propagationPolicy") or (options or {}).get("propagationPolicy"),
                                       dry_run=dry_run)
                await self._respond(send, 200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                "status": "Success"})
                return
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on a collection")
        if kind is NAMESPACES:
            ns = ""
        if method == "GET":
            with cluster.lock:
                obj = cluster.get(kind, ns, name)
                data = dumps(self._table(cluster, kind, [obj], {"resourceVersion": obj["metadata"]["resourceVersion"]})
                             if table else obj)
            await self._respond(send, 200, data)
            return
        if method == "PUT":
            obj = _decode(body, headers)
            with cluster.lock:
                data = dumps(cluster.update(kind, ns, name, obj, manager, sub, dry_run))
            await self._respond(send, 200, data)
            return
        if method == "PATCH":
            content_type = headers.get("content-type", "").split(";")[0].strip()
            patch_type = _PATCH_TYPES.get(content_type)
            if patch_type is None:
                raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                               f"accepted media types include: {', '.join(_PATCH_TYPES)}")
            patch = _decode(body, headers, force_yaml=patch_type == "apply")
            force = query.get("force") in ("true", "1")
            with cluster.lock:
                existed = cluster.store.get(kind.key, ns, name) is not None
                if not existed and patch_type == "apply":  # an apply that creates needs create too
                    cluster.rbac.authorize(user, "create", kind, namespace, name)
                result = cluster.patch(kind, ns, name, patch_type, patch, manager if patch_type != "apply" or
                                       "fieldManager" in query else "", force, sub, dry_run)
                data = dumps(result)
            await self._respond(send, 200 if existed else 201, data)
            return
        if method == "DELETE":
            options = _decode(body, headers) if body else {}
            if not isinstance(options, dict):
                raise ApiError(400, "BadRequest", "DeleteOptions must be an object")
            propagation = query.get("propagationPolicy") or options.get("propagationPolicy")
            if propagation is None and options.get("orphanDependents") is True:
                propagation = "Orphan"
            with cluster.lock:
                data = dumps(cluster.delete(kind, ns, name, propagation, options.get("preconditions"), dry_run))
            await self._respond(send, 200, data)
            return
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported")

    def _table(self, cluster: SimCluster, kind: Kind, items: list[dict], meta: dict) -> dict:
        """The server-side printing `kubectl get` asks for (Accept: ...;as=Table)."""
        columns = [{"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}]
        columns += [{"name": n, "type": t, "format": "", "description": n, "priority": 0} for n, t, _ in kind.columns]
        now = cluster.clock.now()
        rows = []
        for obj in items:
            cells = [obj["metadata"]["name"]] + [
                fn(obj) if fn else _age(now, obj["metadata"].get("creationTimestamp")) for _, _, fn in kind.columns]
            partial = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
            rows.append({"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                    "metadata": partial}})
        return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": columns,
                "rows": rows}


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when the wheel has it


def _decode(body: bytes, headers: dict, force_yaml: bool = False):
    content_type = headers.get("content-type", "")
    try:
        # An apply body is YAML by content type, but clients often send JSON (valid YAML): read it as such.
        if (force_yaml or "yaml" in content_type) and not body.lstrip().startswith(b"{"):
            return yaml.load(body.decode(), Loader=_YAML_LOADER)
        return json.loads(body)
    except (ValueError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ApiError(400, "BadRequest", f"the object provided is unrecognized (body could not be decoded: "
                       f"{str(exc).splitlines()[0]})") from exc


def _age(now: float, created: str | None) -> str:
    if not created:
        return "<unknown>"
    seconds = max(0, int(now - calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ"))))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def protocol_class(app: SimApp) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol, dropping connections whose request targets an unreachable cluster."""

    class DroppingProtocol(H11Protocol):
        def connection_made(self, transport) -> None:
            # asyncio sets TCP_NODELAY only on sockets it created; ours come from a pre-bound socket,
            # and without it every response (headers and body are two writes) waits on a delayed ACK.
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            super().connection_made(transport)

        def data_received(self, data: bytes) -> None:
            if app.unreachable(data.split(b"\r\n", 1)[0]):
                self.transport.abort()
                return
            super().data_received(data)

        def shutdown(self) -> None:
            # An idle TLS connection would wait for the client's close_notify (which pooled clients
            # never send) before uvicorn considers it closed: cut idle connections at once.
            if self.cycle is None or self.cycle.response_complete:
                self.transport.abort()
            else:
                super().shutdown()

    return DroppingProtocol
