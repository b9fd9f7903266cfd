"""The API's OpenAPI document: error bodies, who may call what, the spec body, and links.

FastAPI writes the operations from the routes; this module adds what it cannot know:

- every error response is a problem document (``api.problems.with_problems``);
- string parameters say they hold no NUL character (``api.deps.refuse_nul`` refuses one);
- reads carry an optional bearer requirement (``security: [{}, {HTTPBearer: []}]``) where the
  server leaves them open, a required one where it protects them; writes always need a token;
- the upload's YAML body is described by the spec's own JSON schema (``operator_db.specs.Spec``);
- links say which response value feeds which later request (``POST /specs`` → the model's
  pages; a list → its items), so that clients and stateful testers can walk the API.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from api.problems import with_problems
from operator_db.config import Settings
from operator_db.specs import Spec

BEARER = "HTTPBearer"
"""The security scheme's name (``api.deps.bearer``)."""

_MODEL_NAME = "$response.body#/model"
_FIRST_MODEL = "$response.body#/items/0/name"
_MODEL_PAGES = (
    "get_model",
    "list_model_operators",
    "get_comparison",
    "enqueue",
    "delete_model",
)
_LINKS: dict[tuple[str, str], dict[str, tuple[str, dict[str, str]]]] = {
    ("upload_spec", "201"): {target: (target, {"name": _MODEL_NAME}) for target in _MODEL_PAGES},
    ("list_models", "200"): {target: (target, {"name": _FIRST_MODEL}) for target in _MODEL_PAGES},
    ("enqueue", "201"): {
        "get_estimate": (
            "get_estimate",
            {"name": "$response.body#/model", "device_kind": "$response.body#/device_kind"},
        ),
        "get_roofline": (
            "get_roofline",
            {"name": "$response.body#/model", "device_kind": "$response.body#/device_kind"},
        ),
        "list_jobs": ("list_jobs", {"model": "$response.body#/model"}),
        "get_device_kind": ("get_device_kind", {"name": "$response.body#/device_kind"}),
    },
    ("list_jobs", "200"): {
        "get_job": ("get_job", {"job_id": "$response.body#/items/0/id"}),
        "cancel_job": ("cancel_job", {"job_id": "$response.body#/items/0/id"}),
    },
    ("list_configurations", "200"): {
        "get_configuration": ("get_configuration", {"key": "$response.body#/items/0/key"}),
        "list_measurements": ("list_measurements", {"key": "$response.body#/items/0/key"}),
    },
    ("list_model_operators", "200"): {
        "get_configuration": ("get_configuration", {"key": "$response.body#/items/0/key"}),
    },
    ("list_device_kinds", "200"): {
        "get_device_kind": ("get_device_kind", {"name": "$response.body#/0/name"}),
    },
}
"""(operation, status) → link name → (target operation, parameter → runtime expression)."""


def operation_id(route: APIRoute) -> str:
    """Name each operation after its route function (``list_models``), for links and clients."""
    return route.name


def install(app: FastAPI, settings: Settings) -> None:
    """Make ``app.openapi()`` return the completed document (built once, then kept)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                description=app.description,
                routes=app.routes,
            )
            with_problems(schema)
            _security(schema, protect_reads=settings.api_protect_reads)
            _no_nul(schema)
            _spec_body(schema)
            _links(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _operations(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (method, operation)
        for path in schema.get("paths", {}).values()
        for method, operation in path.items()
    ]


def _security(schema: dict[str, Any], *, protect_reads: bool) -> None:
    """Make the bearer token optional on reads, unless the server protects them."""
    for method, operation in _operations(schema):
        if method == "get" and operation.get("security") and not protect_reads:
            operation["security"] = [{}, {BEARER: []}]


NO_NUL = "^[^\\u0000]*$"
"""The pattern of a string parameter without a pattern of its own (``api.deps.refuse_nul``)."""


def _no_nul(schema: dict[str, Any]) -> None:
    """Say in each string parameter's schema that it holds no NUL character."""
    for _, operation in _operations(schema):
        for parameter in operation.get("parameters", []):
            options = parameter["schema"].get("anyOf", [parameter["schema"]])
            for option in options:
                if option.get("type") == "string" and not {"pattern", "enum"} & set(option):
                    option["pattern"] = NO_NUL


def _spec_body(schema: dict[str, Any]) -> None:
    """Describe the YAML upload with the spec's JSON schema, its parts as components."""
    spec_schema = Spec.model_json_schema(ref_template="#/components/schemas/{model}")
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(spec_schema.pop("$defs", {}))
    components["Spec"] = spec_schema
    for _, operation in _operations(schema):
        if operation.get("operationId") == "upload_spec":
            media = operation["requestBody"]["content"]["application/yaml"]
            media["schema"] = {"$ref": "#/components/schemas/Spec"}


def _links(schema: dict[str, Any]) -> None:
    """Add the response links of ``_LINKS`` to their operations."""
    by_id = {op.get("operationId"): op for _, op in _operations(schema)}
    for (source, status), links in _LINKS.items():
        response = by_id[source]["responses"][status]
        response["links"] = {
            name: {"operationId": target, "parameters": parameters}
            for name, (target, parameters) in links.items()
        }
