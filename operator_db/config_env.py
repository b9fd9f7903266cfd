"""A settings model's values from ``PREFIX_`` environment variables and an optional ``.env`` file.

What ``pydantic-settings`` did for :class:`operator_db.config.Settings`, in the part operator-db
used, without its import (a tenth of a second that every ``opdb`` command paid: it imports asyncio
and pydantic's dataclasses; issue 47's start-up target):

- ``OPDB_<FIELD>`` sets a field, the name in any case; variables naming no field are ignored;
- ``OPDB_<FIELD>__<SUBFIELD>`` sets a field of a nested model (``OPDB_MEASURE__TRIALS=2``), merged
  over a whole nested value given as JSON (``OPDB_MEASURE='{"trials": 2}'``);
- a field (or subfield) whose type is a list, tuple, set, dict or model takes JSON;
- a ``.env`` file in the working directory gives values the environment does not (read with
  python-dotenv, imported only where the file is there); values given to the model win over both.

Every value stays a string for pydantic to validate, as pydantic-settings left it.
"""

from __future__ import annotations

import json
import os
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

_CONTAINERS = (list, tuple, set, frozenset, dict)

NESTED_DELIMITER = "__"
"""Between a field and its subfield in a variable's name: ``OPDB_MEASURE__TRIALS``."""


def _members(annotation: Any) -> list[Any]:
    """Return the types a field's annotation admits, ``None`` left out, ``Annotated`` unwrapped."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in _members(arg) if m is not type(None)]
    return [annotation]


def _is_complex(member: Any) -> bool:
    """Whether a value of this type is given as JSON (a container or a model)."""
    target = get_origin(member) or member
    return isinstance(target, type) and issubclass(target, (*_CONTAINERS, BaseModel))


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """Return the model a field holds (its subfields settable one by one), or None."""
    for member in _members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def _decode(name: str, raw: str, annotation: Any) -> Any:
    """Return ``raw`` as JSON where the field's type is complex, else ``raw`` itself.

    Raises:
        ValueError: a complex-only field's value is not JSON (naming the variable).
    """
    members = _members(annotation)
    if not any(_is_complex(m) for m in members):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        if all(_is_complex(m) for m in members):
            keyed = any(_nested_model(m) or (get_origin(m) or m) is dict for m in members)
            example = '{"name": value}' if keyed else '["a", "b"]'
            raise ValueError(f"{name} must be JSON, e.g. {example}") from None
        return raw


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``base`` with ``over`` laid on it, nested dicts merged key by key."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


def _dotenv(path: Path) -> dict[str, str]:
    """Return the variables of a ``.env`` file; none where it is not there."""
    if not path.is_file():
        return {}
    from dotenv import dotenv_values

    return {key: value for key, value in dotenv_values(path).items() if value is not None}


def variable_names(
    model: type[BaseModel], prefix: str, delimiter: str = NESTED_DELIMITER
) -> set[str]:
    """Return every variable :func:`environment_values` reads for ``model``'s fields, upper case.

    Each field under its own name (a nested model's as JSON), and a nested model's fields under
    ``<NAME><delimiter><FIELD>``.
    """
    names: set[str] = set()
    for name, field in model.model_fields.items():
        variable = f"{prefix}{name}".upper()
        names.add(variable)
        nested = _nested_model(field.annotation)
        if nested is not None:
            names |= variable_names(nested, f"{variable}{delimiter}", delimiter)
    return names


def environment_values(
    model: type[BaseModel],
    *,
    prefix: str,
    delimiter: str = NESTED_DELIMITER,
    env_file: Path | None = Path(".env"),
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Return the values that ``prefix``-ed variables give ``model``'s fields, nested as fields are.

    ``environ`` defaults to the process's environment; ``env_file`` None reads no file.

    Raises:
        ValueError: a list, dict or model field's value is not JSON.
    """
    variables = {**(_dotenv(env_file) if env_file is not None else {}), **(environ or os.environ)}
    fields = model.model_fields
    whole: dict[str, Any] = {}
    parts: dict[str, Any] = {}
    for key, raw in variables.items():
        name = key.lower()
        if not name.startswith(prefix.lower()):
            continue
        field, *path = name[len(prefix) :].split(delimiter)
        if field not in fields:
            continue
        annotation = fields[field].annotation
        if not path:
            whole[field] = _decode(key, raw, annotation)
            continue
        nested = _nested_model(annotation)
        if nested is None:
            continue
        sub = nested.model_fields.get(path[0]) if len(path) == 1 else None
        value = _decode(key, raw, sub.annotation) if sub is not None else raw
        node = parts.setdefault(field, {})
        for step in path[:-1]:
            node = node.setdefault(step, {})
        node[path[-1]] = value
    return _merge(whole, parts)
