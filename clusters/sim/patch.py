"""The four PATCH flavours of kube-apiserver, and server-side apply's field ownership.

Lists of objects that carry a `name` are treated as maps keyed by it (replicatedJobs, containers,
env, volumes ...), as their `x-kubernetes-list-map-keys` / `patchMergeKey` declare; other lists
are atomic. Field ownership is kept in `metadata.managedFields` in the FieldsV1 format. The merge
patches themselves are clusters/rules/patches.py, which the broker's front door shares.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from clusters.rules.patches import keyed
from clusters.sim.store import ApiError

_DELETE = object()


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"json patch path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(doc, list):
            doc = doc[int(part)]
        elif isinstance(doc, dict):
            doc = doc[part]
        else:
            raise KeyError(part)
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "a json patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        try:
            kind, parts = op["op"], _pointer(op["path"])
            if kind == "test":
                if _walk(doc, parts) != op["value"]:
                    raise ApiError(422, "Invalid", f"test operation failed at {op['path']}")
                continue
            if kind in ("move", "copy"):
                value = copy.deepcopy(_walk(doc, _pointer(op["from"])))
                if kind == "move":
                    doc = _remove(doc, _pointer(op["from"]))
            elif kind in ("add", "replace"):
                value = op["value"]
            elif kind == "remove":
                doc = _remove(doc, parts)
                continue
            else:
                raise ApiError(400, "BadRequest", f"unknown json patch operation {kind!r}")
            if kind == "replace":
                _walk(doc, parts)  # must exist
                doc = _remove(doc, parts)
            doc = _add(doc, parts, value)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(422, "Invalid", f"json patch operation {op!r} cannot be applied: {exc}") from exc
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return None
    parent = _walk(doc, parts[:-1])
    if isinstance(parent, list):
        del parent[int(parts[-1])]
    else:
        del parent[parts[-1]]
    return doc


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1])
    if isinstance(parent, list):
        if parts[-1] == "-":
            parent.append(value)
        else:
            parent.insert(int(parts[-1]), value)
    else:
        parent[parts[-1]] = value
    return doc


# server-side apply ----------------------------------------------------------------------------

_IDENTITY = ("apiVersion", "kind")
_META_APPLIED = ("labels", "annotations", "finalizers", "ownerReferences")


def _paths(value: Any, prefix: tuple[str, ...], out: set[tuple[str, ...]]) -> None:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _paths(item, prefix + (f"f:{key}",), out)
    elif keyed(value):
        for item in value:
            key = "k:" + json.dumps({"name": item["name"]}, separators=(",", ":"))
            out.add(prefix + (key, "."))
            _paths({k: v for k, v in item.items()}, prefix + (key,), out)
    else:
        out.add(prefix)


def owned_paths(obj: dict, with_status: bool = False) -> set[tuple[str, ...]]:
    """The leaf fields an object sets, in FieldsV1 segment form."""
    out: set[tuple[str, ...]] = set()
    meta = {k: obj["metadata"][k] for k in _META_APPLIED if obj.get("metadata", {}).get(k)}
    if meta:
        _paths(meta, ("f:metadata",), out)
    for key, value in obj.items():
        if key in _IDENTITY or key == "metadata" or (key == "status" and not with_status):
            continue
        _paths(value, (f"f:{key}",), out)
    return out


def _value_at(obj: Any, path: tuple[str, ...]) -> Any:
    for seg in path:
        if seg == ".":
            return obj
        if seg.startswith("f:"):
            if not isinstance(obj, dict) or seg[2:] not in obj:
                return _DELETE
            obj = obj[seg[2:]]
        else:
            name = json.loads(seg[2:])["name"]
            obj = next((i for i in obj if isinstance(i, dict) and i.get("name") == name), _DELETE) \
                if isinstance(obj, list) else _DELETE
            if obj is _DELETE:
                return obj
    return obj


def _drop(obj: Any, path: tuple[str, ...]) -> None:
    """Remove the field at `path` from a (private, mutable) copy."""
    *parents, last = path
    if last == ".":
        *parents, last = parents
    for seg in parents:
        obj = _value_at(obj, (seg,))
        if obj is _DELETE:
            return
    if last.startswith("f:") and isinstance(obj, dict):
        obj.pop(last[2:], None)
    elif last.startswith("k:") and isinstance(obj, list):
        name = json.loads(last[2:])["name"]
        obj[:] = [i for i in obj if not (isinstance(i, dict) and i.get("name") == name)]


def apply_merge(live: Any, applied: Any) -> Any:
    """Structured merge: maps merge, named lists merge by name, everything else is replaced."""
    if isinstance(applied, dict) and isinstance(live, dict):
        result = dict(live)
        for key, value in applied.items():
            result[key] = apply_merge(live.get(key), value)
        return result
    if keyed(applied) and isinstance(live, list) and all(isinstance(i, dict) for i in live):
        items = {i.get("name"): i for i in live}
        order = [i.get("name") for i in live]
        for item in applied:
            if item["name"] not in items:
                order.append(item["name"])
            items[item["name"]] = apply_merge(items.get(item["name"]), item)
        return [items[n] for n in order]
    return copy.deepcopy(applied)


def _to_fields(paths: set[tuple[str, ...]]) -> dict:
    root: dict = {}
    for path in sorted(paths):
        node = root
        for seg in path:
            node = node.setdefault(seg, {})
    return root


def _from_fields(fields: dict, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for seg, sub in (fields or {}).items():
        if sub:
            out |= _from_fields(sub, prefix + (seg,))
        else:
            out.add(prefix + (seg,))
    return out


def _render(path: tuple[str, ...]) -> str:
    text = ""
    for seg in path:
        if seg == ".":
            continue
        text += "." + seg[2:] if seg.startswith("f:") else f"[name={json.loads(seg[2:])['name']}]"
    return text


def _managers(obj: dict | None) -> list[dict]:
    return list((obj or {}).get("metadata", {}).get("managedFields") or [])


def _entry(manager: str, operation: str, api_version: str, now: str, paths: set, subresource: str = "") -> dict:
    entry = {"manager": manager, "operation": operation, "apiVersion": api_version, "time": now,
             "fieldsType": "FieldsV1", "fieldsV1": _to_fields(paths)}
    if subresource:
        entry["subresource"] = subresource
    return entry


def server_side_apply(live: dict | None, applied: dict, manager: str, force: bool, now: str) -> dict:
    """Merge an apply configuration into `live`; 409 on fields another manager owns with another value."""
    if not manager:
        raise ApiError(400, "BadRequest", "PATCH with apply requires the fieldManager parameter")
    new_paths = owned_paths(applied)
    api_version = applied.get("apiVersion", "")
    entries = _managers(live)
    mine = next((e for e in entries if e["manager"] == manager and e["operation"] == "Apply"), None)
    conflicts: list[tuple[str, tuple[str, ...]]] = []
    kept = []
    for entry in entries:
        if entry is mine or entry.get("subresource"):
            kept.append(entry)
            continue
        theirs = _from_fields(entry.get("fieldsV1", {}))
        clash = {p for p in theirs & new_paths if _value_at(live, p) != _value_at(applied, p)}
        if clash and not force:
            conflicts += [(entry["manager"], p) for p in sorted(clash)]
        kept.append({**entry, "fieldsV1": _to_fields(theirs - clash)} if clash else entry)
    if conflicts:
        causes = [{"type": "FieldManagerConflict", "message": f'conflict with "{m}": {_render(p)}',
                   "field": _render(p)} for m, p in conflicts]
        raise ApiError(409, "Conflict", f"Apply failed with {len(causes)} conflict(s): "
                       + "; ".join(c["message"] for c in causes),
                       {"causes": causes})
    result = apply_merge(live or {}, {k: v for k, v in applied.items() if k != "metadata"})
    result["metadata"] = apply_merge((live or {}).get("metadata", {}),
                                     {k: v for k, v in applied.get("metadata", {}).items()
                                      if k in _META_APPLIED or not live})
    if mine:
        others = set().union(*(_from_fields(e.get("fieldsV1", {})) for e in kept if e is not mine))
        result = copy.deepcopy(result)
        for path in _from_fields(mine.get("fieldsV1", {})) - new_paths - others:
            _drop(result, path)
    managers = [e for e in kept if e is not mine and _from_fields(e.get("fieldsV1", {}))]
    managers.append(_entry(manager, "Apply", api_version, now, new_paths))
    result["metadata"]["managedFields"] = managers
    return result


def record_update(old: dict | None, new: dict, manager: str, now: str, subresource: str = "") -> list[dict]:
    """managedFields after a non-apply write: the writer takes over every field it changed."""
    with_status = subresource == "status"
    new_paths = owned_paths(new, with_status)
    old_paths = owned_paths(old, with_status) if old else set()
    changed = {p for p in new_paths if p not in old_paths or _value_at(old, p) != _value_at(new, p)}
    changed |= old_paths - new_paths
    entries = []
    existing: set = set()
    for entry in _managers(old):
        if entry.get("subresource", "") != subresource:
            entries.append(entry)
            continue
        paths = _from_fields(entry.get("fieldsV1", {}))
        if entry["manager"] == manager and entry["operation"] == "Update":
            existing = paths
            continue
        remaining = paths - changed
        if remaining:
            entries.append(entry if remaining == paths else {**entry, "fieldsV1": _to_fields(remaining)})
    mine = (existing | changed) & new_paths
    if mine:
        entries.append(_entry(manager, "Update", new.get("apiVersion", ""), now, mine, subresource))
    return entries
