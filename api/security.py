"""What keeps a browser safe on this server: security headers, redirects, forms from this origin.

- Every answer carries a Content-Security-Policy (scripts, styles and images from this origin
  only, no inline script, no framing: ``CSP``), ``X-Content-Type-Options: nosniff``,
  ``X-Frame-Options: DENY`` and ``Referrer-Policy: same-origin``.
- A redirect never names the host the request's ``Host`` header claims: one that does (Starlette's
  trailing-slash redirect builds its ``Location`` from it) is made relative, or, where
  ``OPDB_API_PUBLIC_ORIGIN`` is set, built on that origin.
- A form that changes state (the pages' sign-in and sign-out) is taken only from this origin
  (``same_origin``): its ``Origin`` (else ``Referer``) must be the public origin, else the
  request's own host; ``Sec-Fetch-Site: cross-site`` is refused. A client that sends neither
  (curl) is no browser to forge a request from.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.deps import get_settings_dep
from api.problems import problem
from operator_db.config import Settings
from operator_db.errors import PermissionDeniedError

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""The Content-Security-Policy of every answer: the pages load only this origin's assets."""
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
}
"""The headers every answer carries (a route's own value of one is kept)."""


class SecurityHeaders:
    """ASGI middleware: ``HEADERS`` on every HTTP answer; redirects never built on ``Host``."""

    def __init__(self, app: ASGIApp, public_origin: str | None = None) -> None:
        self.app = app
        self.public_origin = public_origin

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request, adding the headers to the answer's start."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
                location = headers.get("location")
                if location is not None:
                    headers["location"] = redirect_target(location, scope, self.public_origin)
            await send(message)

        await self.app(scope, receive, send_with_headers)


_HOST = re.compile(r"^(\[[0-9a-f:.]+\]|[a-z0-9._-]+)(:[0-9]{1,5})?$")
"""A Host header's form: a name or IPv4 address, or an IPv6 address in brackets; a port."""


def host_name(value: str) -> str | None:
    """Return the host a ``Host`` header names, or None where it is not a host.

    Lower case, without its port; an IPv6 address without its brackets.
    """
    match = _HOST.match(value.strip().lower())
    if match is None:
        return None
    return match.group(1).strip("[]").rstrip(".")


class AllowedHosts:
    """ASGI middleware: answer only requests whose ``Host`` is one of ``allowed``.

    ``allowed`` holds names (``opdb.example.org``), ``*.domain`` (any name under it) or ``*``
    (any). The public origin's host is always allowed. A request that names another host (a
    DNS-rebinding page on 127.0.0.1, a misdirected proxy) gets a 400 problem document; so does a
    ``Host`` that is no host. Without a ``Host`` header (HTTP/1.0) only ``*`` answers.
    """

    def __init__(self, app: ASGIApp, allowed: list[str], public_origin: str | None = None) -> None:
        self.app = app
        self.any = "*" in allowed
        names = {a.lower().rstrip(".").strip("[]") for a in allowed if not a.startswith("*")}
        if public_origin is not None:
            names.add((urlsplit(public_origin).hostname or "").lower())
        self.names = frozenset(names)
        self.domains = tuple(a.lower()[1:] for a in allowed if a.startswith("*."))

    def allows(self, header: str | None) -> bool:
        """Whether a request with this ``Host`` header (None: none) is answered."""
        if header is None:
            return self.any
        name = host_name(header)
        if name is None:
            return False
        return self.any or name in self.names or name.endswith(self.domains)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request if its host is allowed, else answer 400."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = next(
            (v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), None
        )
        if self.allows(header):
            await self.app(scope, receive, send)
            return
        refusal = problem(
            400,
            "the request names a host this server does not answer to (its Host header; "
            "OPDB_API_ALLOWED_HOSTS)",
            "HostNotAllowed",
        )
        refusal.headers["Connection"] = "close"
        await refusal(scope, receive, send)


def _host(scope: Scope) -> str:
    """Return the host (and port) the request names: its ``Host`` header, else the server's."""
    for name, value in scope.get("headers", []):
        if name == b"host":
            return str(value.decode("latin-1")).lower()
    server = scope.get("server")
    return f"{server[0]}:{server[1]}" if server else ""


def redirect_target(location: str, scope: Scope, public_origin: str | None) -> str:
    """Return ``location`` without the request's ``Host`` in it.

    A ``Location`` on the host the request named becomes its path (and query), on
    ``public_origin`` where one is set; another site's is left as it is (no route redirects
    there; ``api.ui.pages`` keeps ``next`` on this site).
    """
    parts = urlsplit(location)
    if parts.scheme or parts.netloc:
        if parts.netloc.lower() != _host(scope):
            return location
        location = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if public_origin is not None and location.startswith("/") and not location.startswith("//"):
        return public_origin + location
    return location


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else None


async def same_origin(
    request: Request, settings: Annotated[Settings, Depends(get_settings_dep)]
) -> None:
    """Refuse a form another site sent (cross-site request forgery).

    Raises:
        PermissionDeniedError: the form came from another origin (403).
    """
    origin = request.headers.get("origin")
    sent_from = _origin_of(origin) if origin else None
    if origin and sent_from is None:  # "null": a sandboxed frame, a file, a redirect chain
        raise PermissionDeniedError(f"a form sent from origin {origin!r} is refused")
    if sent_from is None and request.headers.get("referer"):
        sent_from = _origin_of(request.headers["referer"])
    if sent_from is None:
        if request.headers.get("sec-fetch-site") == "cross-site":
            raise PermissionDeniedError("a form sent from another site is refused")
        return
    expected = settings.api_public_origin
    if expected is not None:
        ok = sent_from == expected
    else:  # the scheme may differ behind a proxy that terminates TLS: the host must not
        ok = urlsplit(sent_from).netloc == request.headers.get("host", "").lower()
    if not ok:
        raise PermissionDeniedError(
            f"a form sent from {sent_from} is refused: this server takes forms from "
            f"{expected or 'the host it is reached at'} only (OPDB_API_PUBLIC_ORIGIN)"
        )


def is_secure(request: Request, settings: Settings) -> bool:
    """Whether the browser reaches the server over TLS (a cookie set then is ``Secure``)."""
    public = settings.api_public_origin
    return request.url.scheme == "https" or (public is not None and public.startswith("https:"))
