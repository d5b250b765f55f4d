"""JSON merge patch (RFC 7386) and Kubernetes' strategic merge patch, as kube-apiserver applies them to the
objects the broker handles: lists of objects that carry a `name` (replicatedJobs, containers, env, volumes
...) merge item by item, as their `patchMergeKey` declares; other lists are replaced whole. Shared by the
simulator's API server and the broker's Kubernetes front door.
"""

from __future__ import annotations

import copy
from typing import Any


def keyed(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(i, dict) and "name" in i for i in value)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; returns a new value and leaves both inputs alone."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Merge patch, except that lists of named objects merge item by item (`$patch: delete` removes one)."""
    if isinstance(patch, list) and (keyed(patch) or any(isinstance(i, dict) and i.get("$patch") for i in patch)):
        if isinstance(target, list) and all(isinstance(i, dict) for i in target):
            items = {i.get("name"): i for i in target}
            order = [i.get("name") for i in target]
            for item in patch:
                name = item.get("name")
                if item.get("$patch") == "delete":
                    items.pop(name, None)
                    continue
                if name not in items:
                    order.append(name)
                items[name] = strategic_merge_patch(items.get(name), item)
            return [items[n] for n in order if n in items]
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result
