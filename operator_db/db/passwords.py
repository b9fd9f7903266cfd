"""Role passwords: read from a file or a variable, sent to PostgreSQL as SCRAM-SHA-256 secrets."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from pathlib import Path

from operator_db.config import password_from
from operator_db.errors import InvalidInputError


def scram_verifier(password: str, *, salt: bytes | None = None, iterations: int = 4096) -> str:
    """Return PostgreSQL's SCRAM-SHA-256 secret of ``password`` (what ``pg_authid`` stores).

    Computed here, as psql's password command does, so that the password itself never reaches the
    server (nor its statement log). ``password`` is printable ASCII (:func:`read_password`), which
    SASLprep leaves as it is.
    """
    salt = os.urandom(16) if salt is None else salt
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("ascii"), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", "sha256")

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


_SCRAM = re.compile(r"SCRAM-SHA-256\$(\d+):([A-Za-z0-9+/=]+)\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+")


def verifier_matches(verifier: str | None, password: str) -> bool:
    """Whether a stored SCRAM secret is that of ``password`` (same salt and iterations)."""
    match = _SCRAM.fullmatch(verifier or "")
    if match is None or verifier is None:
        return False
    salt = base64.b64decode(match.group(2))
    again = scram_verifier(password, salt=salt, iterations=int(match.group(1)))
    return hmac.compare_digest(again, verifier)


def read_password(path: Path | None, value: str | None, what: str) -> str | None:
    """Return a password from a file (its first line) or a value given, or None for neither.

    The rule is the settings' (:func:`operator_db.config.password_from`).

    Raises:
        InvalidInputError: both given, the file cannot be read, or the password is empty or
            not printable ASCII.
    """
    try:
        return password_from(path, value, what)
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None
