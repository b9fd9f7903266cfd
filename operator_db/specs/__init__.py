"""The YAML spec format: schema, canonical keys, reading and writing."""

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
    "load_specs",
    "load_spec_text",
    "operator_key",
    "parse_spec",
    "spec_content_hash",
    "write_spec",
]
