"""The pages' sign-in: a signed cookie standing for a token, never the token itself.

The cookie holds ``<expiry>.<mac>``: the expiry in Unix seconds and an HMAC-SHA256 over it keyed
with the token it stands for (and ``OPDB_API_SESSION_SECRET`` where set). The server finds the
token whose MAC matches, so the cookie grants what that token grants, until it expires
(``SESSION_S``) or the token is revoked (taken out of the settings) or the secret changes; a copy
of it never reveals the token. It is ``HttpOnly``, ``SameSite=Strict``, for ``/ui`` only, and
``Secure`` where the server is reached over TLS (``api.security.is_secure``).
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Request
from fastapi.responses import Response

from api.deps import Right, server_tokens
from api.security import is_secure
from operator_db.config import Settings

COOKIE = "opdb_ui_session"
"""The cookie a browser keeps its sign-in in (HttpOnly, SameSite=Strict, path /ui)."""
SESSION_S = 12 * 3600
"""How long a sign-in lasts, in s."""
_LABEL = b"operator-db ui session\x00"


def _mac(settings: Settings, token: bytes, expires: int) -> str:
    secret = settings.api_session_secret
    key = (secret.get_secret_value().encode() + b"\x00" if secret else b"") + token
    return hmac.new(key, _LABEL + str(expires).encode(), hashlib.sha256).hexdigest()


def session_value(settings: Settings, token: str, now_s: float) -> str:
    """Return the cookie's value for ``token``, valid ``SESSION_S`` from ``now_s`` (Unix s)."""
    expires = int(now_s) + SESSION_S
    return f"{expires}.{_mac(settings, token.encode('utf-8', 'surrogateescape'), expires)}"


def session_right(settings: Settings, value: str | None, now_s: float) -> Right | None:
    """Return what the cookie ``value`` may do, or None: absent, malformed, expired or revoked."""
    expiry, _, mac = (value or "").partition(".")
    if not expiry.isdigit() or len(expiry) > 12 or int(expiry) <= now_s:
        return None
    found: Right | None = None
    for token, right in server_tokens(settings):
        if hmac.compare_digest(_mac(settings, token, int(expiry)), mac) and found != "write":
            found = right
    return found


def sign_in(
    response: Response, request: Request, settings: Settings, token: str, now_s: float
) -> None:
    """Set the sign-in cookie for ``token`` on ``response``."""
    response.set_cookie(
        COOKIE,
        session_value(settings, token, now_s),
        max_age=SESSION_S,
        path="/ui",
        secure=is_secure(request, settings),
        httponly=True,
        samesite="strict",
    )


def sign_out(response: Response, request: Request, settings: Settings) -> None:
    """Clear the sign-in cookie on ``response``."""
    response.delete_cookie(
        COOKIE, path="/ui", secure=is_secure(request, settings), httponly=True, samesite="strict"
    )
