"""Read and write YAML specs; every error names the file and the path inside it."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from operator_db.errors import SpecError
from operator_db.specs.keys import operator_key, spec_content_hash
from operator_db.specs.loader import YAMLLimitError, load_yaml
from operator_db.specs.schema import SPEC_VERSION, SUPPORTED_SPEC_VERSIONS, Spec

SPEC_SUFFIXES = (".yaml", ".yml")


def format_loc(loc: Sequence[int | str]) -> str:
    """Format a pydantic location as a path: ``('operators', 3)`` → ``operators[3]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def format_error(err: ErrorDetails) -> str:
    """Turn one pydantic error into a short message that says what was expected and what came."""
    kind = err["type"]
    ctx = err.get("ctx", {})
    got = err.get("input")
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "greater_than" and ctx.get("gt") == 0:
        return f"must be positive, got {_short(got)}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        bound = {
            "greater_than": ">",
            "greater_than_equal": ">=",
            "less_than": "<",
            "less_than_equal": "<=",
        }[kind]
        limit = next(iter(ctx.values()), "?")
        return f"must be {bound} {limit}, got {_short(got)}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '?')}, got {_short(got)}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    msg = err["msg"][0].lower() + err["msg"][1:]
    return f"{msg}, got {_short(got)}"


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with what ingestion needs: its source, content hash and operator keys."""

    source: str
    spec: Spec
    content_hash: str
    keys: tuple[str, ...]


def upgrade_spec_data(data: dict[str, Any]) -> dict[str, Any]:
    """Return parsed spec data in the current format: a version-1 spec's operators get ``form``.

    Version 1 called an operator's form ``kind``; anything else is returned as it is (validation
    reports what is wrong with it).
    """
    if data.get("spec_version") != 1:
        return data
    upgraded = {**data, "spec_version": SPEC_VERSION}
    if isinstance(data.get("operators"), list):
        upgraded["operators"] = [
            {("form" if k == "kind" else k): v for k, v in op.items()}
            if isinstance(op, dict)
            else op
            for op in data["operators"]
        ]
    return upgraded


def parse_spec(data: object, source: str) -> LoadedSpec:
    """Validate already-parsed YAML/JSON data as a spec.

    Raises:
        SpecError: naming ``source`` and the path of the first problem.
    """
    if not isinstance(data, dict):
        raise SpecError(source, "", f"a spec must be a mapping, got {type(data).__name__}")
    version = data.get("spec_version")
    if version is not None and version not in SUPPORTED_SPEC_VERSIONS:
        raise SpecError(
            source,
            "spec_version",
            f"unknown spec_version {_short(version)}; this operator-db reads "
            + ", ".join(str(v) for v in SUPPORTED_SPEC_VERSIONS),
        )
    try:
        spec = Spec.model_validate(upgrade_spec_data(data))
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise SpecError(source, format_loc(first["loc"]), format_error(first) + more) from None
    keys: list[str] = []
    seen: dict[str, int] = {}
    for i, op in enumerate(spec.operators):
        try:
            key = operator_key(op, spec.model.mode)
        except ValueError as exc:  # NaN or infinity in an argument
            raise SpecError(source, f"operators[{i}]", f"not representable: {exc}") from None
        if op.key is not None and op.key != key:
            raise SpecError(
                source,
                f"operators[{i}].key",
                f"does not match the configuration (expected {key[:12]}…, got {op.key[:12]}…); "
                "remove it or fix the configuration",
            )
        if key in seen:
            raise SpecError(
                source,
                f"operators[{i}]",
                f"same configuration as operators[{seen[key]}]; merge them and add their counts",
            )
        seen[key] = i
        keys.append(key)
    return LoadedSpec(source, spec, spec_content_hash(spec), tuple(keys))


def load_yaml_text(text: str, source: str) -> object:
    """Parse YAML text with the spec loader (``operator_db.specs.loader``: safe and bounded).

    Raises:
        SpecError: on a YAML syntax error, or a document over the loader's limits (nesting,
            aliases), with the line and column.
    """
    try:
        return load_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "invalid YAML"
        if isinstance(exc, YAMLLimitError):
            raise SpecError(source, where, f"YAML over a limit: {problem}") from None
        raise SpecError(source, where, f"invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise SpecError(source, "", f"invalid YAML: {str(exc).splitlines()[0]}") from None


def load_spec_text(text: str, source: str) -> LoadedSpec:
    """Parse and validate YAML text as a spec (``source`` names it in errors)."""
    data = load_yaml_text(text, source)
    if data is None:
        raise SpecError(source, "", "the file is empty")
    return parse_spec(data, source)


def load_spec(path: str | Path, *, max_bytes: int) -> LoadedSpec:
    """Read, parse and validate one spec file of at most ``max_bytes`` bytes.

    Raises:
        SpecError: the file is unreadable, too large, not UTF-8, not YAML or not a valid spec.
    """
    path = Path(path)
    source = str(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise SpecError(
                source,
                "",
                f"file is {size} bytes, over the limit of {max_bytes} bytes (OPDB_MAX_SPEC_BYTES)",
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError(source, "", f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(source, "", f"not UTF-8 text (byte {exc.start})") from None
    return load_spec_text(text, source)


def expand_spec_paths(patterns: Iterable[str | Path]) -> list[Path]:
    """Expand files, directories (their ``*.yaml``/``*.yml``, recursively) and globs, in order.

    Raises:
        SpecError: a pattern matches nothing.
    """
    found: list[Path] = []
    for pattern in patterns:
        text = os.fspath(pattern)
        path = Path(text)
        if path.is_dir():
            matches = sorted(
                p for p in path.rglob("*") if p.suffix in SPEC_SUFFIXES and p.is_file()
            )
        elif path.exists():
            matches = [path]
        else:
            matches = [Path(p) for p in sorted(glob.glob(text, recursive=True))]
        if not matches:
            raise SpecError(text, "", "no such file, or no spec (*.yaml, *.yml) matches it")
        found.extend(m for m in matches if m not in found)
    return found


def load_specs(patterns: Iterable[str | Path], *, max_bytes: int) -> list[LoadedSpec]:
    """Expand ``patterns`` (see :func:`expand_spec_paths`) and load every spec, validated whole.

    Raises:
        SpecError: a pattern matches nothing, or a file is not a valid spec.
    """
    return [load_spec(path, max_bytes=max_bytes) for path in expand_spec_paths(patterns)]


class _SpecDumper(yaml.SafeDumper):
    """Dumper that writes short lists of scalars (shapes, strides) on one line."""


def _represent_list(dumper: _SpecDumper, data: list[Any]) -> yaml.Node:
    scalars = all(not isinstance(v, dict | list) for v in data)
    # A call order is a long list of integers: wrapped lines of them, not one per line.
    flow = scalars and (len(data) <= 16 or all(type(v) is int for v in data))
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_SpecDumper.add_representer(list, _represent_list)


def _represent_tuple(dumper: _SpecDumper, data: tuple[Any, ...]) -> yaml.Node:
    return _represent_list(dumper, list(data))


_SpecDumper.add_representer(tuple, _represent_tuple)


def dump_spec(spec: Spec, *, with_keys: bool = True) -> str:
    """Serialise a spec as YAML text (fields in schema order, defaults left out, keys filled in)."""
    data = spec.model_dump(mode="json", exclude_defaults=True)
    data["spec_version"] = spec.spec_version
    data["processed"] = spec.processed
    if with_keys:
        for op_data, op in zip(data["operators"], spec.operators, strict=True):
            op_data["key"] = operator_key(op, spec.model.mode)
    ordered = {
        k: data[k]
        for k in ("spec_version", "model", "provenance", "processed", "operators", "calls", "syncs")
        if k in data
    }
    return yaml.dump(ordered, Dumper=_SpecDumper, sort_keys=False, allow_unicode=True, width=100)


def write_spec(spec: Spec, path: str | Path) -> None:
    """Write a spec to ``path`` as YAML (parent directories are created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_spec(spec), encoding="utf-8")


def mark_processed(path: str | Path) -> None:
    """Set ``processed: true`` in a spec file, leaving the rest of the text untouched."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    new, replaced = re.subn(
        r"(?m)^processed:[ \t]*(false|False|no)[ \t]*$", "processed: true", text
    )
    if not replaced and not re.search(r"(?m)^processed:[ \t]*(true|True|yes)[ \t]*$", text):
        new = text.rstrip("\n") + "\nprocessed: true\n"
    if new != text:
        path.write_text(new, encoding="utf-8")
