"""Canonical forms and stable keys of operator configurations and spec contents."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from operator_db.specs.schema import Mode, OperatorSpec, Spec


def canonical_json(value: Any) -> str:
    """Serialise ``value`` as compact JSON with sorted keys; NaN and infinity are refused."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def canonical_operator(op: OperatorSpec, mode: Mode) -> dict[str, Any]:
    """Return the canonical form that identifies a configuration: what is run, on what, how.

    Counts, FLOPs, bytes, outputs and locations are derived or model-specific and left out, so the
    same Conv2d seen in two models has one key. The form keeps its spec-version-1 name, ``kind``:
    stored keys are identities and must not change with the format's field names.
    """
    return {
        "op": op.op,
        "kind": op.form,
        "args": op.args,
        "dtype": op.dtype,
        "inputs": [[list(t.shape), t.dtype] for t in op.inputs],
        "call": None if op.call is None else {"args": op.call.args, "kwargs": op.call.kwargs},
        "mode": mode,
    }


def operator_key(op: OperatorSpec, mode: Mode) -> str:
    """Return the stable key of a configuration: SHA-256 (hex) of its canonical form."""
    return hashlib.sha256(canonical_json(canonical_operator(op, mode)).encode()).hexdigest()


NVTX_RANGE_PREFIX = "opdb:"
"""What starts the name of the NVTX range pushed around a configuration's probe call."""
NVTX_RANGE_REGEX = NVTX_RANGE_PREFIX + "[0-9a-f]{64}"
"""A regular expression that matches every such range name (and nothing else of ours)."""
_NVTX_RANGE = re.compile(NVTX_RANGE_PREFIX + "([0-9a-f]{64})(?![0-9a-f])")


def nvtx_range_name(key: str) -> str:
    """Return the NVTX range name of the configuration ``key``: ``opdb:`` and the whole key.

    The measuring side pushes it (``OPDB_MEASURE__NVTX``), the Nsight Compute importer reads it
    back (:func:`key_of_nvtx_range`): one rule for both. The whole key, not a prefix, so that a
    range names exactly one configuration.
    """
    return NVTX_RANGE_PREFIX + key


def key_of_nvtx_range(text: str) -> str | None:
    """Return the configuration key in ``text`` that names an NVTX range of ours, or None.

    ``text`` may hold more than the name (a profiler's stack of ranges, ``<domain>/opdb:…``); the
    innermost (last) of several is taken.
    """
    found = _NVTX_RANGE.findall(text)
    return str(found[-1]) if found else None


def spec_content_hash(spec: Spec) -> str:
    """Return a SHA-256 (hex) of what a spec says about its model: model and operators.

    Provenance and the ``processed`` marker are not content: re-harvesting the same model on another
    day yields the same hash. Fields are hashed under their spec-version-1 names, and the call
    order only where a spec has one, so that a model stored before version 2 (or 3) is not seen
    as changed.
    """
    body: dict[str, Any] = {
        "model": spec.model.model_dump(mode="json"),
        "operators": [
            _v1_names(op.model_dump(mode="json", exclude={"key"})) for op in spec.operators
        ],
    }
    if spec.calls is not None:
        body["calls"] = spec.calls
    if spec.syncs:
        body["syncs"] = spec.syncs
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


def _v1_names(op: dict[str, Any]) -> dict[str, Any]:
    """Return an operator's dumped fields with ``form`` under its version-1 name, ``kind``."""
    return {("kind" if name == "form" else name): value for name, value in op.items()}
