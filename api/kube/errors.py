"""Errors as kube-apiserver words them: `Status` objects, which kubectl and client libraries read."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi.responses import JSONResponse

from api.kube.resource import GROUP, KIND, PLURAL
from api.problems import Problem
from broker.store.errors import Conflict, Invalid, NotFound

REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
           406: "NotAcceptable", 409: "Conflict", 413: "RequestEntityTooLarge", 415: "UnsupportedMediaType",
           422: "Invalid", 429: "TooManyRequests", 500: "InternalError"}


class KubeError(Exception):
    def __init__(self, code: int, message: str, *, reason: str | None = None, name: str | None = None,
                 causes: list[dict[str, str]] | None = None, headers: dict[str, str] | None = None,
                 group: str = GROUP, kind: str = PLURAL) -> None:
        super().__init__(message)
        self.code, self.message, self.reason, self.name = code, message, reason or REASONS.get(code, "Unknown"), name
        self.causes, self.headers, self.group, self.kind = causes, headers, group, kind

    def status(self) -> dict[str, Any]:
        details: dict[str, Any] = {"group": self.group, "kind": self.kind}
        if self.name:
            details["name"] = self.name
        if self.causes:
            details["causes"] = self.causes
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message,
                "reason": self.reason, "details": details, "code": self.code}

    def response(self) -> JSONResponse:
        return JSONResponse(self.status(), status_code=self.code, headers=self.headers)


def not_found(name: str) -> KubeError:
    return KubeError(404, f'{PLURAL}.{GROUP} "{name}" not found', name=name)


def forbidden(user: str, verb: str, namespace: str | None) -> KubeError:
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    return KubeError(403, f'{PLURAL}.{GROUP} is forbidden: User "{user}" cannot {verb} resource "{PLURAL}" '
                          f'in API group "{GROUP}"{where}')


def invalid(name: str, field: str, message: str) -> KubeError:
    return KubeError(422, f'{KIND}.{GROUP} "{name}" is invalid: {field or "<root>"}: {message}', name=name,
                     causes=[{"reason": "FieldValueInvalid", "message": message, "field": field}], kind=KIND)


def from_broker(exc: Exception, name: str | None) -> KubeError:
    """The broker's own errors (the job service's, the REST API's problems) said as Status."""
    if isinstance(exc, Invalid):
        return invalid(name or "", exc.path, exc.message)
    if isinstance(exc, NotFound):
        return not_found(name) if name else KubeError(404, str(exc))
    if isinstance(exc, Conflict):
        return KubeError(409, str(exc), name=name)
    assert isinstance(exc, Problem)
    return KubeError(exc.status, exc.detail, reason=REASONS.get(exc.status, HTTPStatus(exc.status).phrase),
                     name=name, headers=exc.headers)
