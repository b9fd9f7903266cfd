"""Write validated specs into the store: idempotent, one transaction, shared configurations once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import delete, insert, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from operator_db.db.models import Model, ModelOperator, OperatorConfig, utcnow
from operator_db.errors import ConflictError
from operator_db.specs.io import LoadedSpec
from operator_db.specs.schema import OperatorSpec

IngestStatus = Literal["new", "unchanged", "replaced"]
_CHUNK = 500
_DERIVED = ("outputs", "flops", "flops_backward", "flop_rule", "bytes", "params")


@dataclass(frozen=True)
class Disagreement:
    """A known configuration whose stored derived fields differ from a spec's (the stored kept)."""

    source: str
    position: int
    """The operator's index in the spec (``operators[i]``)."""
    key: str
    op: str
    inputs: str
    """The inputs' shapes, ``4x32 4x32``."""
    fields: tuple[tuple[str, Any, Any], ...]
    """(field, stored value, the spec's value) of each field that differs."""

    def describe(self) -> str:
        """Return one line naming the configuration and each field that differs."""
        differ = ", ".join(
            f"{name} (stored {_shown(stored)}, spec {_shown(given)})"
            for name, stored, given in self.fields
        )
        return (
            f"{self.source}: operators[{self.position}] ({self.op} on {self.inputs or 'nothing'}) "
            f"is configuration {self.key}, stored with other {differ}; the stored values are kept"
        )


def _shown(value: Any) -> str:
    text = "none" if value is None else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class IngestResult:
    """What ingesting one spec did."""

    source: str
    model: str
    status: IngestStatus
    operators: int
    new_configs: int
    known_configs: int
    disagreeing_configs: int = 0
    """Known configurations whose stored FLOPs/bytes/outputs differ from the spec's (kept)."""
    disagreements: tuple[Disagreement, ...] = ()
    """Each of them, in spec order: which fields differ (:meth:`Disagreement.describe`)."""

    def warnings(self, shown: int = 20) -> list[str]:
        """Return one line per disagreeing configuration (the first ``shown``, then a count)."""
        lines = [d.describe() for d in self.disagreements[:shown]]
        more = self.disagreeing_configs - len(lines)
        if more > 0:
            lines.append(
                f"{self.source}: and {more} more known configurations stored with other FLOPs, "
                "bytes, params or outputs; the stored values are kept"
            )
        return lines


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _config_row(key: str, op: OperatorSpec, mode: str) -> dict[str, Any]:
    return {
        "key": key,
        "op": op.op,
        "form": op.form,
        "mode": mode,
        "args": op.args,
        "dtype": op.dtype,
        "inputs": [t.model_dump(mode="json", exclude_none=True) for t in op.inputs],
        "call": None if op.call is None else op.call.model_dump(mode="json"),
        "outputs": [t.model_dump(mode="json", exclude_none=True) for t in op.outputs],
        "flops": op.flops,
        "flops_backward": op.flops_backward,
        "flop_rule": op.flop_rule,
        "bytes": op.bytes,
        "params": op.params,
        "created_at": utcnow(),
    }


def config_ids(session: Session, keys: Sequence[str]) -> dict[str, int]:
    """Return the ids of the stored configurations among ``keys``."""
    found: dict[str, int] = {}
    for chunk in _chunks(keys):
        rows = session.execute(
            select(OperatorConfig.key, OperatorConfig.id).where(OperatorConfig.key.in_(chunk))
        )
        found.update({key: id_ for key, id_ in rows})
    return found


def _insert_ignoring_duplicates(session: Session, rows: list[dict[str, Any]]) -> None:
    """Insert configurations; one that another writer inserted meanwhile is left as it is."""
    dialect = session.get_bind().dialect.name
    for start in range(0, len(rows), _CHUNK):
        part = rows[start : start + _CHUNK]
        if dialect == "postgresql":
            session.execute(
                pg_insert(OperatorConfig).on_conflict_do_nothing(index_elements=["key"]), part
            )
        elif dialect == "sqlite":
            session.execute(
                sqlite_insert(OperatorConfig).on_conflict_do_nothing(index_elements=["key"]), part
            )
        else:
            session.execute(insert(OperatorConfig), part)


ANALYZE_AFTER = 1000
"""PostgreSQL: configurations inserted at once after which the table's statistics are refreshed
(``ANALYZE``). Planned on an empty table's statistics, a lookup of 500 keys scanned the whole
table: 0.25 s each while a data set's 17,000 configurations went in, 9 minutes for its import."""


@dataclass(frozen=True)
class StoredConfigs:
    """What :func:`store_configs` did: every configuration's id by key, and how many were new."""

    ids: dict[str, int]
    new: int


def store_configs(
    session: Session, configs: Sequence[tuple[str, OperatorSpec, str]]
) -> StoredConfigs:
    """Store the configurations not stored yet and return every one's id by key; flushes.

    ``configs``: (key, configuration, mode). The one path by which configurations enter the
    store: a spec's (:func:`ingest_spec`) and an imported data set's. A configuration already
    stored is shared, never duplicated nor changed.
    """
    keys = [key for key, _, _ in configs]
    known = config_ids(session, keys)
    missing: dict[str, dict[str, Any]] = {}
    for key, op, mode in configs:
        if key not in known and key not in missing:
            missing[key] = _config_row(key, op, mode)
    _insert_ignoring_duplicates(session, list(missing.values()))
    if len(missing) >= ANALYZE_AFTER and session.get_bind().dialect.name == "postgresql":
        session.execute(text("ANALYZE operator_configs"))
    return StoredConfigs({**known, **config_ids(session, list(missing))}, len(missing))


def _disagreements(
    session: Session, loaded: LoadedSpec, known: dict[str, int]
) -> tuple[Disagreement, ...]:
    """Return the known configurations whose stored derived fields differ from the spec's."""
    if not known:
        return ()
    positions: dict[str, int] = {}
    for i, key in enumerate(loaded.keys):
        positions.setdefault(key, i)
    mode = loaded.spec.model.mode
    found: list[Disagreement] = []
    for chunk in _chunks(list(known)):
        for cfg in session.scalars(select(OperatorConfig).where(OperatorConfig.key.in_(chunk))):
            op = loaded.spec.operators[positions[cfg.key]]
            wanted = _config_row(cfg.key, op, mode)
            fields = tuple(
                (name, getattr(cfg, name), wanted[name])
                for name in _DERIVED
                if getattr(cfg, name) != wanted[name]
            )
            if fields:
                inputs = " ".join("x".join(map(str, t.shape)) for t in op.inputs)
                where = positions[cfg.key]
                found.append(Disagreement(loaded.source, where, cfg.key, op.op, inputs, fields))
    return tuple(sorted(found, key=lambda d: d.position))


def ingest_spec(session: Session, loaded: LoadedSpec) -> IngestResult:
    """Store one validated spec; flushes, never commits (the caller owns the transaction).

    Re-ingesting identical content writes nothing. Changed content for a model that exists
    replaces its operator list; configurations are shared by key and never duplicated.
    """
    spec = loaded.spec
    model = session.scalars(select(Model).where(Model.name == spec.model.name)).one_or_none()
    keys = list(loaded.keys)
    if model is not None and model.spec_hash == loaded.content_hash:
        return IngestResult(loaded.source, model.name, "unchanged", len(keys), 0, len(keys))

    known = config_ids(session, keys)
    mode = spec.model.mode
    ids = store_configs(
        session, [(key, op, mode) for key, op in zip(keys, spec.operators, strict=True)]
    ).ids
    missing = [key for key in ids if key not in known]
    disagreeing = _disagreements(session, loaded, known)

    info = spec.model
    fields: dict[str, Any] = {
        "reference": info.reference,
        "overrides": info.overrides,
        "mode": info.mode,
        "dtype": info.dtype,
        "batch_size": info.batch_size,
        "inputs": [t.model_dump(mode="json", exclude_none=True) for t in info.inputs],
        "description": info.description,
        "spec_version": spec.spec_version,
        "spec_hash": loaded.content_hash,
        "provenance": spec.provenance,
        "calls": list(spec.calls) if spec.calls is not None else None,
        "syncs": list(spec.syncs) if spec.syncs else None,
    }
    status: IngestStatus
    if model is None:
        model = Model(name=info.name, **fields)
        session.add(model)
        session.flush()
        status = "new"
    else:
        for name, value in fields.items():
            setattr(model, name, value)
        model.updated_at = utcnow()
        session.execute(delete(ModelOperator).where(ModelOperator.model_id == model.id))
        status = "replaced"
    session.execute(
        insert(ModelOperator),
        [
            {
                "model_id": model.id,
                "config_id": ids[key],
                "position": position,
                "count": op.count,
                "locations": list(op.locations),
            }
            for position, (key, op) in enumerate(zip(keys, spec.operators, strict=True))
        ],
    )
    session.flush()
    return IngestResult(
        loaded.source,
        info.name,
        status,
        len(keys),
        len(missing),
        len(keys) - len(missing),
        len(disagreeing),
        disagreeing,
    )


def check_batch(specs: Sequence[LoadedSpec]) -> None:
    """Refuse a batch that names one model twice with different content.

    Raises:
        ConflictError: naming both files.
    """
    seen: dict[str, LoadedSpec] = {}
    for loaded in specs:
        name = loaded.spec.model.name
        other = seen.get(name)
        if other is not None and other.content_hash != loaded.content_hash:
            raise ConflictError(
                f"{loaded.source}: model.name: {name!r} is also in {other.source} with other "
                "content; give one of them another name"
            )
        seen[name] = loaded


def ingest_specs(session: Session, specs: Sequence[LoadedSpec]) -> list[IngestResult]:
    """Store several validated specs in the caller's transaction (see :func:`ingest_spec`).

    Raises:
        ConflictError: two specs name the same model with different content.
    """
    check_batch(specs)
    return [ingest_spec(session, loaded) for loaded in specs]
