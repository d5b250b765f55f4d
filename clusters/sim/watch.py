"""Watches as kube-apiserver serves them: the initial list or the events since a resourceVersion, then each change
as a line of chunked JSON, with bookmarks when asked, until the watch's timeout."""

from __future__ import annotations

import asyncio
import collections
import time


from clusters.sim.cluster import SimCluster
from clusters.sim.resources import Kind
from clusters.sim.store import ApiError, Event, Filter, Watcher, dumps


WATCH_TIMEOUT = 1800.0
BOOKMARK_INTERVAL = 5.0


class _WatchStream:
    """Events for one watch request; pushed under the cluster lock from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: collections.deque[tuple[str, Event]] = collections.deque()
        self.ready = asyncio.Event()
        self.closed = False

    def push(self, type_: str, event: Event) -> None:
        self.pending.append((type_, event))
        self._signal()

    def close(self) -> None:
        self.closed = True
        self._signal()

    def _signal(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self.ready.set()
        else:
            self.loop.call_soon_threadsafe(self.ready.set)


def _line(type_: str, event: Event) -> bytes:
    return event.line() if type_ == event.type else dumps({"type": type_, "object": event.obj}) + b"\n"


class Watches:
    """A part of `SimApp`, whose `__init__` sets the state it reads."""

    async def _watch(self, cluster: SimCluster, kind: Kind, namespace: str | None, query: dict, send) -> None:
        flt = Filter(namespace, query.get("labelSelector"), query.get("fieldSelector"))
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        initial_events = query.get("sendInitialEvents") in ("true", "1")
        timeout = min(float(query.get("timeoutSeconds") or WATCH_TIMEOUT), WATCH_TIMEOUT)
        rv = query.get("resourceVersion") or ""
        stream = _WatchStream(asyncio.get_running_loop())
        first: list[bytes] = []
        error = None
        with cluster.lock:
            try:
                if rv in ("", "0") or initial_events:
                    for obj in cluster.list(kind, namespace, query.get("labelSelector"), query.get("fieldSelector"))[0]:
                        first.append(dumps({"type": "ADDED", "object": obj}) + b"\n")
                    if initial_events and bookmarks:
                        first.append(self._bookmark(cluster, kind, {"k8s.io/initial-events-end": "true"}))
                else:
                    try:
                        since = int(rv)
                    except ValueError as exc:
                        raise ApiError(400, "BadRequest", f"invalid resourceVersion {rv!r}") from exc
                    backlog: list[tuple[str, Event]] = []
                    catch_up = Watcher(flt, lambda t, e: backlog.append((t, e)))
                    for event in cluster.store.since(kind.key, since):
                        catch_up.offer(event)
                    first += [_line(t, e) for t, e in backlog]
            except ApiError as err:
                error = err
            else:
                watcher = Watcher(flt, stream.push)
                cluster.store.watchers.setdefault(kind.key, set()).add(watcher)
                self.streams[cluster.name].add(stream)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"cache-control", b"no-cache, private"),
                                (b"transfer-encoding", b"chunked")]})
        if error is not None:
            await send({"type": "http.response.body",
                        "body": dumps({"type": "ERROR", "object": error.status()}) + b"\n"})
            return
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + BOOKMARK_INTERVAL
        try:
            if first:
                await send({"type": "http.response.body", "body": b"".join(first), "more_body": True})
            while not stream.closed and not self.stopping:
                now = time.monotonic()
                if now >= deadline:
                    break
                wait = min(deadline, next_bookmark if bookmarks else deadline) - now
                try:
                    await asyncio.wait_for(stream.ready.wait(), timeout=max(wait, 0.001))
                except asyncio.TimeoutError:
                    pass
                stream.ready.clear()
                chunk = []
                with cluster.lock:
                    while stream.pending:
                        chunk.append(_line(*stream.pending.popleft()))
                    if bookmarks and time.monotonic() >= next_bookmark:
                        chunk.append(self._bookmark(cluster, kind))
                        next_bookmark = time.monotonic() + BOOKMARK_INTERVAL
                if chunk:
                    await send({"type": "http.response.body", "body": b"".join(chunk), "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            with cluster.lock:
                cluster.store.watchers.get(kind.key, set()).discard(watcher)
            self.streams[cluster.name].discard(stream)

    @staticmethod
    def _bookmark(cluster: SimCluster, kind: Kind, annotations: dict | None = None) -> bytes:
        meta: dict = {"resourceVersion": str(cluster.store.rv)}
        if annotations:
            meta["annotations"] = annotations
        return dumps({"type": "BOOKMARK", "object": {"kind": kind.kind, "apiVersion": kind.api_version,
                                                     "metadata": meta}}) + b"\n"
