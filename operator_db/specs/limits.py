"""Bounds on what a spec may hold: integers a database stores, free-form JSON, strings.

Every integer must fit a signed 64-bit column (``BIGINT``): a larger one would overflow when
stored, not fail validation. Free-form JSON (constructor arguments, calls, overrides, provenance)
is bounded in size, depth, string length and number range, and holds no NaN or infinity (the
argument encoding writes those as ``{"float": "inf"}``). No string holds a NUL character, which
PostgreSQL cannot store in text or JSONB.
"""

from __future__ import annotations

import json
import math
from typing import Annotated

from pydantic import AfterValidator, Field, JsonValue

from operator_db.specs.text import text_problem

INT64_MIN = -(2**63)
"""Smallest integer accepted anywhere in a spec."""
INT64_MAX = 2**63 - 1
"""Largest integer accepted anywhere in a spec (and largest sum of ``count`` × FLOPs, ...)."""
INT32_MAX = 2**31 - 1
"""Largest ``count`` (calls per forward) and ``batch_size``: stored in 32-bit integer columns."""
MAX_JSON_BYTES = 64 * 1024
"""Largest free-form JSON field, in bytes of compact JSON."""
MAX_JSON_DEPTH = 32
"""Deepest nesting of lists and mappings inside a free-form JSON field."""
MAX_JSON_STRING = 4096
"""Longest string (or mapping key) inside a free-form JSON field, in characters."""
MAX_LOCATIONS = 10_000
"""Most module names in one operator's ``locations``."""
MAX_LOCATION_CHARS = 1000
"""Longest module name in ``locations``, in characters."""

NO_NUL = r"^[^\x00]*$"
"""Pattern of a string without NUL characters."""

Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]


def _where(path: list[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _problem(value: JsonValue, path: list[str | int]) -> tuple[list[str | int], str] | None:
    """Return the place inside a JSON value and what is wrong there, or None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return None
        return path, f"integer {_digits(value)} is outside the signed 64-bit range"
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, f"{value} is not a finite number")
    if isinstance(value, str):
        problem = _string_problem(value)
        return None if problem is None else (path, problem)
    if len(path) >= MAX_JSON_DEPTH:
        return path, f"nested deeper than {MAX_JSON_DEPTH} levels"
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(key, str) and (problem := _string_problem(key)) is not None:
            return [*path, key[:40]], f"key: {problem}"
        found = _problem(item, [*path, key])
        if found is not None:
            return found
    return None


def _string_problem(text: str) -> str | None:
    if len(text) > MAX_JSON_STRING:
        return f"string of {len(text)} characters is longer than {MAX_JSON_STRING}"
    if "\x00" in text:
        return "string holds a NUL character"
    problem = text_problem(text, lines=True)
    return None if problem is None else f"string {problem}"


def _digits(value: int) -> str:
    text = str(value)
    return text if len(text) <= 30 else f"{text[:12]}…({len(text)} digits)"


def check_json(value: JsonValue) -> JsonValue:
    """Return ``value`` if it is within the bounds above.

    Raises:
        ValueError: one line naming the place inside ``value`` and what is wrong there.
    """
    found = _problem(value, [])
    if found is not None:
        path, problem = found
        raise ValueError(f"{_where(path)}: {problem}" if path else problem)
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_JSON_BYTES:
        raise ValueError(f"{size} bytes of JSON, over the limit of {MAX_JSON_BYTES}")
    return value


JsonObject = Annotated[dict[str, JsonValue], AfterValidator(check_json)]
"""A bounded free-form JSON mapping."""
JsonList = Annotated[list[JsonValue], AfterValidator(check_json)]
"""A bounded free-form JSON list."""
