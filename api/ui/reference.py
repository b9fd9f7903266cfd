"""``/docs``: the API's reference, rendered by the server from its OpenAPI document.

No script and nothing from another site: the page works offline and under the pages' CSP
(``api.security``). Each operation lists who may call it, its parameters, its body and its
answers, with a ``curl`` line; each schema its fields. ``/openapi.json`` is the same document for
clients and tools (Swagger UI, code generators).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from api.ui.pages import render

router = APIRouter(include_in_schema=False)
_REF = "#/components/schemas/"
_PATTERN_SHOWN = 80
"""Characters of a pattern shown; a longer one (a device kind's name) says where it is."""


@dataclass
class Item:
    """One parameter or schema property as the page lists it."""

    name: str
    where: str
    type: str
    required: bool
    description: str


@dataclass
class Operation:
    """One operation of the API as the page shows it."""

    method: str
    path: str
    anchor: str
    summary: str
    description: str
    access: str
    parameters: list[Item]
    body: str | None
    responses: list[tuple[str, str, str]]
    curl: str


@dataclass
class Schema:
    """One component schema: its description and fields."""

    name: str
    description: str
    fields: list[Item] = field(default_factory=list)
    values: str = ""


def type_of(schema: dict[str, Any]) -> str:
    """Return a schema's type in a few words: ``integer ≥ 1``, ``array of Job``, ``a | null``."""
    if "$ref" in schema:
        return str(schema["$ref"]).removeprefix(_REF)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(type_of(option) for option in schema[key])
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {type_of(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {type_of(schema['additionalProperties'])}"
    words = [str(kind)]
    if "format" in schema:
        words.append(f"({schema['format']})")
    bounds = (
        ("minimum", "≥"),
        ("exclusiveMinimum", ">"),
        ("maximum", "≤"),
        ("exclusiveMaximum", "<"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
    )
    words += [f"{sign} {schema[key]}" for key, sign in bounds if key in schema]
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        shown = pattern if len(pattern) <= _PATTERN_SHOWN else "(see /openapi.json)"
        words.append(f"matching {shown}")
    return " ".join(words)


def _access(operation: dict[str, Any]) -> str:
    security = operation.get("security")
    if not security:
        return "open"
    return "token optional (reads are open)" if {} in security else "token needed"


def _operation(path: str, method: str, operation: dict[str, Any]) -> Operation:
    parameters = [
        Item(
            p["name"],
            p["in"],
            type_of(p.get("schema", {})),
            bool(p.get("required")),
            p.get("description", ""),
        )
        for p in operation.get("parameters", [])
    ]
    content = operation.get("requestBody", {}).get("content", {})
    body = ", ".join(f"{media}: {type_of(m.get('schema', {}))}" for media, m in content.items())
    responses = [
        (
            status,
            answer.get("description", ""),
            ", ".join(type_of(m.get("schema", {})) for m in answer.get("content", {}).values()),
        )
        for status, answer in sorted(operation.get("responses", {}).items())
    ]
    access = _access(operation)
    curl = ["curl"] + ([f"-X {method.upper()}"] if method != "get" else [])
    if access != "open":
        curl.append("-H 'Authorization: Bearer $OPDB_TOKEN'")
    if "application/json" in content:
        curl.append("-H 'Content-Type: application/json' -d '{...}'")
    elif content:
        media = next(iter(content))
        curl.append(f"-H 'Content-Type: {media}' --data-binary @FILE")
    curl.append(f"'http://HOST:8000{path}'")
    return Operation(
        method=method.upper(),
        path=path,
        anchor=operation.get("operationId", f"{method}-{path}"),
        summary=operation.get("summary", ""),
        description=operation.get("description", ""),
        access=access,
        parameters=parameters,
        body=body or None,
        responses=responses,
        curl=" ".join(curl),
    )


def _schema(name: str, schema: dict[str, Any]) -> Schema:
    required = set(schema.get("required", []))
    return Schema(
        name=name,
        description=schema.get("description", ""),
        fields=[
            Item(key, "", type_of(prop), key in required, prop.get("description", ""))
            for key, prop in schema.get("properties", {}).items()
        ],
        values=type_of(schema) if "enum" in schema else "",
    )


def reference(document: dict[str, Any]) -> dict[str, Any]:
    """Return what the reference page shows of an OpenAPI ``document``."""
    operations = [
        _operation(path, method, operation)
        for path, item in document.get("paths", {}).items()
        for method, operation in item.items()
    ]
    schemas = document.get("components", {}).get("schemas", {})
    return {
        "info": document.get("info", {}),
        "operations": operations,
        "schemas": [_schema(name, schemas[name]) for name in sorted(schemas)],
    }


@router.get("/docs", response_class=HTMLResponse)
def docs(request: Request) -> HTMLResponse:
    """Render the API's reference (no script, nothing from another site)."""
    app: FastAPI = request.app
    return render(request, "reference.html", page="docs", **reference(app.openapi()))


@router.get("/redoc")
def redoc() -> RedirectResponse:
    """FastAPI's other docs page loaded its script from a CDN: the reference is at /docs."""
    return RedirectResponse("/docs", status_code=308)


def install(app: FastAPI) -> None:
    """Serve ``/docs`` (and ``/redoc``) from this module: set ``docs_url=None, redoc_url=None``."""
    app.include_router(router)
