"""Errors on the pages: an error page where a browser would show a problem document's JSON.

An error of the library on an HTML page, or on a form of the pages (a refused sign-in: another
site's, or throttled, with its ``Retry-After``), is an error page with the status the API would
answer; elsewhere, the roofline's SVG included, the API's problem document (``api.problems``).
"""

from __future__ import annotations

from typing import Any, cast

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.problems import http_status
from api.ui.pages import pages, render
from operator_db.errors import OperatorDBError


def error_page(request: Request, exc: OperatorDBError) -> HTMLResponse:
    """Render an error of the library as a page with the status the API would answer.

    :func:`install` makes it the answer to any such error a page or a form raises.
    """
    return _page(request, http_status(exc), str(exc))


def _page(request: Request, code: int, message: str) -> HTMLResponse:
    """Render the error page: ``code`` (the HTTP status it is answered with) and ``message``."""
    return render(request, "error.html", status_code=code, code=code, message=message)


def _form(request: Request) -> bool:
    """Say whether ``request`` is a form of the pages (sign-in, sign-out).

    A browser sent it and would show a problem document's raw JSON: a refused one gets the error
    page too.
    """
    return request.method == "POST" and request.url.path.startswith("/ui/")


def _shown(answer: Response, shown: HTMLResponse) -> HTMLResponse:
    """Return ``shown`` with the headers ``answer`` (the problem) had beyond its body."""
    for name in ("retry-after", "www-authenticate"):
        if name in answer.headers:
            shown.headers[name] = answer.headers[name]
    return shown


def install(app: Any) -> None:
    """Answer errors on the pages and their forms with an error page (after ``api.problems``)."""
    problem = app.exception_handlers[OperatorDBError]
    http_problem = app.exception_handlers[StarletteHTTPException]

    async def _error(request: Request, exc: Exception) -> Response:
        answer = cast(Response, await problem(request, exc))
        route = request.scope.get("route")
        page = route in pages.routes and getattr(route, "response_class", None) is HTMLResponse
        if (page or _form(request)) and isinstance(exc, OperatorDBError):
            return _shown(answer, error_page(request, exc))
        return answer

    async def _http_error(request: Request, exc: Exception) -> Response:
        answer = cast(Response, await http_problem(request, exc))
        if _form(request) and isinstance(exc, StarletteHTTPException):  # a throttled sign-in
            return _shown(answer, _page(request, exc.status_code, exc.detail))
        return answer

    app.add_exception_handler(OperatorDBError, _error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
