"""RFC 9457 problem+json answers for every error the API gives."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from broker.store.errors import Conflict, Invalid, NotFound

PROBLEM_JSON = "application/problem+json"


class Problem(Exception):
    """Raise from a route to answer with problem+json."""

    def __init__(self, status: int, detail: str, *, title: str | None = None,
                 headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(detail)
        self.status, self.detail, self.extra, self.headers = status, detail, extra, headers
        self.title = title or HTTPStatus(status).phrase


def problem_response(status: int, title: str, detail: str, headers: dict[str, str] | None = None,
                     **extra: Any) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _field_path(location: tuple | list) -> str:
    parts = [str(p) for p in location if p not in ("body", "query", "path", "header")]
    return ".".join(parts)


def install_problem_handlers(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def _problem(_: Request, exc: Problem) -> JSONResponse:
        return problem_response(exc.status, exc.title, exc.detail, exc.headers, **exc.extra)

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return problem_response(404, "Not Found", str(exc))

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
        return problem_response(409, "Conflict", str(exc))

    @app.exception_handler(Invalid)
    async def _invalid(_: Request, exc: Invalid) -> JSONResponse:
        extra = {} if exc.clusters is None else {"clusters": exc.clusters}
        return problem_response(422, "Invalid", str(exc), errors=[{"field": exc.path, "message": exc.message}],
                                **extra)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).description
        return problem_response(exc.status_code, HTTPStatus(exc.status_code).phrase, detail,
                                getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"field": _field_path(e.get("loc", ())), "message": e.get("msg", "invalid")}
                  for e in exc.errors()]
        detail = "; ".join(f"{e['field'] or 'request'}: {e['message']}" for e in errors)
        return problem_response(422, "Invalid request", detail, errors=errors)

    @app.exception_handler(OperationalError)
    async def _database(_: Request, exc: OperationalError) -> JSONResponse:
        if "database is locked" in str(exc.orig):  # SQLite's busy timeout ran out behind a long write
            return problem_response(409, "Conflict", "the database is busy with another write; nothing was changed, "
                                                     "retry in a few seconds", {"Retry-After": "5"})
        raise exc  # any other database failure is a 500, logged

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        return problem_response(500, "Internal Server Error",
                                f"the server failed on this request ({type(exc).__name__}); it has been logged")
