"""The YAML spec format: schema, canonical keys, reading and writing.

The names below load on first use (PEP 562): ``operator_db.specs.text``, which the database's
kind names use, comes without pydantic's schema or YAML (35 ms of ``opdb models list``'s start
on a 2-vCPU VM).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from operator_db.specs.io import (
        LoadedSpec,
        dump_spec,
        expand_spec_paths,
        load_spec,
        load_spec_text,
        load_specs,
        parse_spec,
        write_spec,
    )
    from operator_db.specs.keys import operator_key, spec_content_hash
    from operator_db.specs.schema import (
        DTYPE_BYTES,
        SPEC_VERSION,
        CallSpec,
        ModelInfo,
        OperatorSpec,
        Spec,
        TensorSpec,
    )

_HOMES = {
    **dict.fromkeys(
        (
            "LoadedSpec",
            "dump_spec",
            "expand_spec_paths",
            "load_spec",
            "load_spec_text",
            "load_specs",
            "parse_spec",
            "write_spec",
        ),
        "io",
    ),
    **dict.fromkeys(("operator_key", "spec_content_hash"), "keys"),
    **dict.fromkeys(
        (
            "DTYPE_BYTES",
            "SPEC_VERSION",
            "CallSpec",
            "ModelInfo",
            "OperatorSpec",
            "Spec",
            "TensorSpec",
        ),
        "schema",
    ),
}
"""Each public name → its module under ``operator_db.specs``."""

__all__ = [
    "DTYPE_BYTES",
    "SPEC_VERSION",
    "CallSpec",
    "LoadedSpec",
    "ModelInfo",
    "OperatorSpec",
    "Spec",
    "TensorSpec",
    "dump_spec",
    "expand_spec_paths",
    "load_spec",
    "load_spec_text",
    "load_specs",
    "operator_key",
    "parse_spec",
    "spec_content_hash",
    "write_spec",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted((*globals(), *_HOMES))
