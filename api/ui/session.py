"""The pages' sign-in: a random cookie kept server-side, standing for a token, never the token.

The cookie holds 32 random bytes (``secrets.token_urlsafe``) and nothing else. The server keeps
the SHA-256 of that value, the SHA-256 of the token it was made with and its expiry
(``ui_sessions``, ``db/session_tables.py``). A cookie grants what its token grants while

- its row is there: signing out deletes it, so a copy of the cookie taken before dies with it,
  restarts or not;
- it has not expired (``SESSION_S`` after signing in, enforced by the server, whatever the
  browser keeps);
- its token is still one of the server's (taking a token out of the settings ends every
  sign-in made with it).

Nothing in the cookie depends on the token, so it is no oracle for the token offline (an HMAC
keyed with the token was). It is ``HttpOnly``, ``SameSite=Strict``, for ``/ui`` only, and
``Secure`` where the server is reached over TLS (``api.security.is_secure``). Expired rows are
deleted at each sign-in.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import UTC, datetime

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from api.deps import Right, server_tokens
from api.security import is_secure
from operator_db.config import Settings
from operator_db.db import queries

COOKIE = "opdb_ui_session"
"""The cookie a browser keeps its sign-in in (HttpOnly, SameSite=Strict, path /ui)."""
SESSION_S = 12 * 3600
"""How long a sign-in lasts, in s."""
_VALUE_CHARS = 43
"""Length of a cookie's value (32 bytes, URL-safe base64)."""


def _digest(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()


def _at(now_s: float) -> datetime:
    return datetime.fromtimestamp(now_s, UTC)


def start_session(session: Session, token: str, now_s: float) -> str:
    """Store a new sign-in for ``token`` from ``now_s`` (Unix s); return the cookie's value."""
    value = secrets.token_urlsafe(32)
    queries.add_ui_session(
        session,
        _digest(value.encode()),
        _digest(token.encode("utf-8", "surrogateescape")),
        _at(now_s),
        _at(now_s + SESSION_S),
    )
    return value


def session_right(
    settings: Settings, session: Session, value: str | None, now_s: float
) -> Right | None:
    """Return what the cookie ``value`` may do, or None.

    None: absent, unknown, ended (signed out), expired, or standing for a token the server no
    longer has.
    """
    if not value or len(value) != _VALUE_CHARS:
        return None
    row = queries.find_ui_session(session, _digest(value.encode()))
    if row is None or row.expires_at.replace(tzinfo=UTC) <= _at(now_s):
        return None
    found: Right | None = None
    for token, right in server_tokens(settings):
        if hmac.compare_digest(_digest(token), row.token_digest) and found != "write":
            found = right
    return found


def sign_in(
    response: Response,
    request: Request,
    settings: Settings,
    session: Session,
    token: str,
    now_s: float,
) -> None:
    """Store a sign-in for ``token`` and set its cookie on ``response``."""
    response.set_cookie(
        COOKIE,
        start_session(session, token, now_s),
        max_age=SESSION_S,
        path="/ui",
        secure=is_secure(request, settings),
        httponly=True,
        samesite="strict",
    )


def sign_out(response: Response, request: Request, settings: Settings, session: Session) -> None:
    """End the request's sign-in (its row: every copy of the cookie) and clear the cookie."""
    value = request.cookies.get(COOKIE)
    if value:
        queries.end_ui_session(session, _digest(value.encode()))
    response.delete_cookie(
        COOKIE, path="/ui", secure=is_secure(request, settings), httponly=True, samesite="strict"
    )
