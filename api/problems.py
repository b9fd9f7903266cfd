"""Every error as an RFC 9457 problem document (``application/problem+json``), and its OpenAPI.

Domain errors (``OperatorDBError``) map to a status once, here; FastAPI's request validation and
routing errors and anything unexpected become problem documents too, so no client input ever gets
plain text. The OpenAPI schema declares the problem body for every error response.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from api.retry import LOST
from operator_db.errors import (
    AuthenticationError,
    ConflictError,
    ConnectionLostError,
    DatabaseError,
    DiskFullError,
    InvalidInputError,
    NotFoundError,
    OperatorDBError,
    PermissionDeniedError,
    TooLargeError,
)

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger("operator_db.api")

_STATUS: list[tuple[type[OperatorDBError], int]] = [
    (InvalidInputError, 422),
    (NotFoundError, 404),
    (ConflictError, 409),
    (AuthenticationError, 401),
    (PermissionDeniedError, 403),
    (TooLargeError, 413),
    (DiskFullError, 507),
    (DatabaseError, 503),
    (OperatorDBError, 400),
]
"""Domain error → HTTP status, most specific first (the only place that knows HTTP codes)."""

ERROR_STATUSES = (400, 401, 403, 404, 405, 409, 413, 422, 429, 500, 503, 507)
"""Statuses the API may answer with a problem document; OpenAPI declares them all."""

RETRY_AFTER_S = 2
"""What a 503 for a database that is away says to wait before retrying, s."""

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
"""The standard methods: what 405's ``Allow`` may name and what metrics count by name."""


class Problem(BaseModel):
    """An error (RFC 9457): one line for a person (``detail``), a kind for a program."""

    type: str = Field(default="about:blank", description="A URI naming the problem's kind.")
    title: str = Field(description="The status's phrase, e.g. 'Not Found'.")
    status: int = Field(description="The HTTP status code.")
    detail: str = Field(description="One line saying what is wrong.")
    error: str = Field(description="The error's kind, e.g. SpecError, NotFoundError.")
    instance: str | None = Field(default=None, description="The request path.")


def http_status(exc: OperatorDBError) -> int:
    """Map a domain error to its HTTP status."""
    return next(code for cls, code in _STATUS if isinstance(exc, cls))


def problem(
    status: int,
    detail: str,
    error: str,
    request: Request | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """Return a problem document response."""
    body = Problem(
        title=HTTPStatus(status).phrase,
        status=status,
        detail=" ".join(detail.split()) or HTTPStatus(status).phrase,
        error=error,
        instance=None if request is None else request.url.path,
    )
    return JSONResponse(
        body.model_dump(), status_code=status, media_type=PROBLEM_JSON, headers=headers
    )


def domain_problem(request: Request, exc: OperatorDBError) -> JSONResponse:
    """Return the problem document of a domain error.

    A 401 names the Bearer scheme; a 503 (the database is away) says when to retry.
    """
    status = http_status(exc)
    headers = {"WWW-Authenticate": 'Bearer realm="operator-db"'} if status == 401 else None
    if status == 503:
        headers = {"Retry-After": str(RETRY_AFTER_S)}
        if isinstance(exc, ConnectionLostError) and request is not None:
            setattr(request.state, LOST, True)  # a read is run once more (api.retry)
    return problem(status, str(exc), type(exc).__name__, request, headers)


async def _domain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OperatorDBError)
    return domain_problem(request, exc)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(part) for part in first.get("loc", ()))
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return problem(422, f"{where}: {first.get('msg', 'invalid')}{more}", "ValidationError", request)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request))
    return problem(exc.status_code, detail, "HTTPError", request, headers)


def allowed_methods(request: Request) -> list[str]:
    """Return every method some route serves at the request's path (405's ``Allow``)."""
    return [
        method
        for method in METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL
            for route in request.app.routes
        )
    ]


async def _catch_all(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """Answer anything unexpected with a 500 problem document, and log it with its traceback."""
    try:
        return await call_next(request)
    except Exception:  # noqa: BLE001 - the last line of defence: no plain-text 500, no reset
        log.exception("internal error on %s %s", request.method, request.url.path)
        return problem(
            500, "internal error; the server's log has the details", "InternalError", request
        )


def install(app: FastAPI) -> None:
    """Register the problem handlers (``api.openapi`` declares the error responses)."""
    app.add_exception_handler(OperatorDBError, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.middleware("http")(_catch_all)


def with_problems(schema: dict[str, Any]) -> dict[str, Any]:
    """Declare a problem document for every error response of every operation."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    content = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            responses = operation.setdefault("responses", {})
            for code in ERROR_STATUSES:
                responses[str(code)] = {
                    "description": HTTPStatus(code).phrase + " (a problem document)",
                    "content": content,
                }
    return schema
