"""A patch or an apply of a JobSet the broker has placed: it may change nothing the tenant submitted. A change is
refused as kube-apiserver refuses one to an immutable field (422), an apply that takes fields the broker owns as a
conflict (409, unless forced)."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from api.kube.errors import KubeError, invalid
from api.kube.objects import BROKER_MANAGER, submitted_fields
from api.kube.resource import API_VERSION


def _immutable(name: str, field: str) -> KubeError:
    return invalid(name, field.lstrip("."), "field is immutable: the broker placed the JobSet as it was submitted; "
                                            "delete it and create it again to change it")


def unchanged(name: str, wanted: dict[str, Any], stored: dict[str, Any]) -> None:
    """A patched JobSet must come out as it was submitted (422 naming what would change)."""
    wanted, stored = submitted_fields(wanted), submitted_fields(stored)
    for field, section in (("spec", lambda o: o["spec"]), ("metadata.labels", lambda o: o["metadata"]["labels"]),
                           ("metadata.annotations", lambda o: o["metadata"]["annotations"])):
        if section(wanted) != section(stored):
            raise _immutable(name, field)


def _applied(applied: Any, stored: Any, path: str = "") -> tuple[list[str], list[str]]:
    """Server-side apply over what is stored: the fields it sets to other values (the broker owns every submitted
    field: a conflict) and the fields it adds; fields it leaves out stay as they are."""
    changed: list[str] = []
    added: list[str] = []
    for key, value in applied.items():
        where = f"{path}.{key}"
        if key not in stored:
            added.append(where)
        elif isinstance(value, dict) and isinstance(stored[key], dict):
            deeper = _applied(value, stored[key], where)
            changed, added = changed + deeper[0], added + deeper[1]
        elif value != stored[key]:
            changed.append(where)
    return changed, added


def check_apply(request: Request, name: str, applied: dict[str, Any], stored: dict[str, Any]) -> None:
    """As kube-apiserver answers an apply that takes fields another manager owns (409, unless forced); a forced
    one, or one that adds fields, is refused as a change to an immutable field (422)."""
    changed, added = _applied(submitted_fields(applied), submitted_fields(stored))
    if changed and request.query_params.get("force") not in ("true", "1"):
        owner = f'conflict with "{BROKER_MANAGER}" using {API_VERSION}'
        raise KubeError(409, f"Apply failed with {len(changed)} conflict{'s' * (len(changed) > 1)}: "
                             + "; ".join(f"{owner}: {field}" for field in changed), name=name,
                        causes=[{"reason": "FieldManagerConflict", "message": owner, "field": field}
                                for field in changed])
    if changed or added:
        raise _immutable(name, (changed + added)[0])
