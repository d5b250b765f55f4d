"""The versioned object store of one simulated cluster: what etcd plus the watch cache are to kube-apiserver.

Stored objects are never mutated in place: every write stores a new dict (sharing unchanged
sub-trees with the old one). That lets lists and watch events hand out references without deep
copies, and lets many nodes share identical sub-objects, which keeps 50,000 nodes small.
"""

from __future__ import annotations

import base64
import json
from collections import deque
from typing import Callable, Iterable, Mapping

from clusters.rules.labels import Selector, parse_selector

DEFAULT_HISTORY = 2000


class ApiError(Exception):
    """An error that the API answers with a `metav1.Status` object."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict:
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            status["details"] = self.details
        return status


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class Event:
    """One change: the object after it (for DELETED: the last state) and the state before it."""

    __slots__ = ("rv", "type", "obj", "prev", "_line")

    def __init__(self, rv: int, type_: str, obj: dict, prev: dict | None) -> None:
        self.rv, self.type, self.obj, self.prev, self._line = rv, type_, obj, prev, None

    def line(self) -> bytes:
        """The watch-stream line, serialised once however many watchers receive it."""
        if self._line is None:
            self._line = dumps({"type": self.type, "object": self.obj}) + b"\n"
        return self._line


class FieldSelector:
    """`a.b=c,d!=e` over dotted paths of the object (what pods use: spec.nodeName, status.phase)."""

    def __init__(self, text: str | None) -> None:
        self.terms: list[tuple[list[str], bool, str]] = []
        for term in filter(None, (t.strip() for t in (text or "").split(","))):
            if "!=" in term:
                path, value, equal = *term.split("!=", 1), False
            elif "==" in term:
                path, value, equal = *term.split("==", 1), True
            elif "=" in term:
                path, value, equal = *term.split("=", 1), True
            else:
                raise ApiError(400, "BadRequest", f"invalid field selector term {term!r}")
            self.terms.append((path.strip().split("."), equal, value.strip()))

    def matches(self, obj: Mapping) -> bool:
        for path, equal, value in self.terms:
            node = obj
            for part in path:
                node = node.get(part) if isinstance(node, Mapping) else None
            actual = "" if node is None else str(node).lower() if isinstance(node, bool) else str(node)
            if (actual == value) != equal:
                return False
        return True


class Filter:
    """Namespace + label selector + field selector of a list or watch request."""

    def __init__(self, namespace: str | None = None, labels: str | None = None, fields: str | None = None) -> None:
        self.namespace = namespace
        try:
            self.labels: Selector = parse_selector(labels or "")
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {exc}") from exc
        self.fields = FieldSelector(fields)

    def matches(self, obj: Mapping | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        if self.labels.requirements and not self.labels.matches(meta.get("labels") or {}):
            return False
        return not self.fields.terms or self.fields.matches(obj)


class Watcher:
    """A watch request: receives the events that concern it through `push` (thread-safe by contract)."""

    def __init__(self, flt: Filter, push: Callable[[str, Event | None], None]) -> None:
        self.filter, self.push = flt, push

    def offer(self, event: Event) -> None:
        now, before = self.filter.matches(event.obj), self.filter.matches(event.prev)
        if event.type == "DELETED":
            if before or now:
                self.push("DELETED", event)
        elif now and before:
            self.push("MODIFIED", event)
        elif now:
            self.push("ADDED", event)
        elif before:  # the object left the selector: a watcher sees it go
            self.push("DELETED", event)


class Store:
    def __init__(self, history: int = DEFAULT_HISTORY) -> None:
        self.rv = 0
        self.history_size = history
        self.objects: dict[str, dict[tuple[str, str], dict]] = {}
        self._history: dict[str, deque[Event]] = {}
        self._compacted: dict[str, int] = {}
        self.watchers: dict[str, set[Watcher]] = {}
        self.listeners: list[Callable[[str, Event], None]] = []
        self.owned: dict[str, set[tuple[str, str, str]]] = {}

    # reads -----------------------------------------------------------------------------------
    def get(self, key: str, namespace: str, name: str) -> dict | None:
        return self.objects.get(key, {}).get((namespace, name))

    def items(self, key: str) -> Iterable[dict]:
        return self.objects.get(key, {}).values()

    def list(self, key: str, flt: Filter, limit: int = 0, token: str | None = None) -> tuple[list[dict], str, str | None, int | None]:
        """Items in key order; with `limit`, one page plus a continue token (and how many remain)."""
        table = self.objects.get(key, {})
        rv, start = self.rv, None
        if token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                rv, start = int(decoded["rv"]), tuple(decoded["start"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ApiError(400, "BadRequest", "continue key is not valid") from exc
            if rv < self._compacted.get(key, 0):
                raise gone("The provided continue parameter is too old to display a consistent list result. "
                           "You can start a new list without the continue parameter.")
        keys = sorted(k for k in table if flt.namespace is None or k[0] == flt.namespace)
        if start is not None:
            keys = [k for k in keys if k > start]
        selected, next_token, remaining = [], None, None
        for i, k in enumerate(keys):
            obj = table[k]
            if not flt.matches(obj):
                continue
            if limit and len(selected) == limit:
                last = (selected[-1]["metadata"].get("namespace") or "", selected[-1]["metadata"]["name"])
                next_token = base64.urlsafe_b64encode(dumps({"rv": rv, "start": list(last)})).decode()
                remaining = sum(1 for k2 in keys[i:] if flt.matches(table[k2]))
                break
            selected.append(obj)
        return selected, str(self.rv), next_token, remaining

    def since(self, key: str, rv: int) -> list[Event]:
        """Events after `rv`, or 410 Gone when the history no longer reaches back that far."""
        if rv < self._compacted.get(key, 0):
            raise gone(f"too old resource version: {rv} ({self._compacted.get(key, 0) + 1})")
        events: list[Event] = []
        for event in reversed(self._history.get(key, ())):
            if event.rv <= rv:
                break
            events.append(event)
        events.reverse()
        return events

    # writes ----------------------------------------------------------------------------------
    def _stamp(self, obj: dict) -> dict:
        self.rv += 1
        return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}

    def _owners(self, obj: dict | None) -> list[str]:
        return [ref["uid"] for ref in (obj or {}).get("metadata", {}).get("ownerReferences") or () if "uid" in ref]

    def _index(self, key: str, old: dict | None, new: dict | None) -> None:
        ref_old = self._owners(old)
        ref_new = self._owners(new)
        if ref_old == ref_new:
            return
        source = old or new
        entry = (key, source["metadata"].get("namespace") or "", source["metadata"]["name"])
        for uid in ref_old:
            children = self.owned.get(uid)
            if children:
                children.discard(entry)
                if not children:
                    del self.owned[uid]
        for uid in ref_new:
            self.owned.setdefault(uid, set()).add(entry)

    def put(self, key: str, obj: dict) -> dict:
        """Create or replace; returns the stored object with its new resourceVersion."""
        meta = obj["metadata"]
        ident = (meta.get("namespace") or "", meta["name"])
        table = self.objects.setdefault(key, {})
        old = table.get(ident)
        stored = self._stamp(obj)
        table[ident] = stored
        self._index(key, old, stored)
        self._emit(key, Event(self.rv, "MODIFIED" if old else "ADDED", stored, old))
        return stored

    def delete(self, key: str, namespace: str, name: str) -> dict | None:
        old = self.objects.get(key, {}).pop((namespace, name), None)
        if old is None:
            return None
        self._index(key, old, None)
        last = self._stamp(old)
        self._emit(key, Event(self.rv, "DELETED", last, old))
        return last

    def _emit(self, key: str, event: Event) -> None:
        history = self._history.get(key)
        if history is None:
            history = self._history[key] = deque()
        history.append(event)
        if len(history) > self.history_size:
            self._compacted[key] = history.popleft().rv
        for watcher in tuple(self.watchers.get(key, ())):
            watcher.offer(event)
        for listener in self.listeners:
            listener(key, event)

    def compact(self) -> None:
        """Forget all history, as an etcd compaction does: older resourceVersions now give 410 Gone."""
        for key in set(self._history) | set(self.objects):
            self._history.pop(key, None)
            self._compacted[key] = self.rv
