"""A device kind's configurations as roofline points: their work, their dtype, the fastest rate.

The roofline of a kind's configurations reads their FLOPs and compulsory bytes
(:func:`kind_config_work`) beside their figures (:func:`~operator_db.db.queries.config_figures`,
which says which result counts); a cache level's attained roof is the fastest result of a
configuration whose compulsory bytes fit in the level (:func:`fastest_within`); the kernels an
imported result names, for the points above every roof (:func:`imported_kernels`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Float, cast, func, select
from sqlalchemy.orm import Session

from operator_db.db.models import Measurement, OperatorConfig

_CHUNK = 500
"""Ids per ``IN (...)`` list."""


@dataclass(frozen=True)
class ConfigWork:
    """What the roofline reads of one configuration measured on a kind."""

    config_id: int
    key: str
    op: str
    flops: int | None
    bytes: int | None
    """Compulsory bytes of one call."""
    dtype: str | None
    """The configuration's dtype, else that of its results on the kind (imported rows name it
    there only)."""


def kind_config_work(session: Session, kind_id: int) -> dict[int, ConfigWork]:
    """Return every configuration with a per-operator result on the kind, by id.

    Only the columns the roofline needs are read (never the inputs, the call or the results' raw
    samples); one query.
    """
    rows = session.execute(
        select(
            OperatorConfig.id,
            OperatorConfig.key,
            OperatorConfig.op,
            OperatorConfig.flops,
            OperatorConfig.bytes,
            func.coalesce(OperatorConfig.dtype, func.min(Measurement.dtype)),
        )
        .join(Measurement, Measurement.config_id == OperatorConfig.id)
        .where(Measurement.device_kind_id == kind_id)
        .group_by(
            OperatorConfig.id,
            OperatorConfig.key,
            OperatorConfig.op,
            OperatorConfig.flops,
            OperatorConfig.bytes,
            OperatorConfig.dtype,
        )
    )
    return {
        int(id_): ConfigWork(int(id_), str(key), str(op), flops, nbytes, dtype)
        for id_, key, op, flops, nbytes, dtype in rows
    }


@dataclass(frozen=True)
class RateRow:
    """One result of a configuration, with the work it did: a rate its kind reached."""

    config_id: int
    key: str
    op: str
    flops: int | None
    bytes: int
    """Compulsory bytes of one call."""
    dtype: str
    """The result's dtype."""
    time_s: float
    """Its per-call time, s."""

    @property
    def bytes_per_s(self) -> float:
        """Compulsory bytes / time."""
        return self.bytes / self.time_s


@dataclass(frozen=True)
class FastestWithin:
    """A page of a kind's fastest results within some bytes, and how many configurations fit."""

    configs: int
    """Configurations of 1 to ``max_bytes`` compulsory bytes with a result on the kind (0: none,
    and no rows)."""
    rows: list[RateRow]
    """The results, fastest first."""


def fastest_within(
    session: Session, kind_id: int, *, max_bytes: float, limit: int = 64, offset: int = 0
) -> FastestWithin:
    """Return the kind's results fastest first (compulsory bytes / time), a page of ``limit``.

    Only results of configurations moving 1 to ``max_bytes`` compulsory bytes; from ``offset``;
    with the number of such configurations, in the same statement. Every stored per-operator
    result counts (own and imported, any timing and cache mode): each is a rate the kind's
    memory reached. Ties go to the lowest configuration id, then result id.
    """
    where = [
        Measurement.device_kind_id == kind_id,
        OperatorConfig.bytes > 0,
        OperatorConfig.bytes <= max_bytes,
        Measurement.time_median_s > 0,
    ]
    configs = (
        select(func.count(func.distinct(OperatorConfig.id)))
        .select_from(OperatorConfig)
        .join(Measurement, Measurement.config_id == OperatorConfig.id)
        .where(*where)
        .scalar_subquery()
    )
    rate = cast(OperatorConfig.bytes, Float) / Measurement.time_median_s
    rows = session.execute(
        select(
            OperatorConfig.id,
            OperatorConfig.key,
            OperatorConfig.op,
            OperatorConfig.flops,
            OperatorConfig.bytes,
            Measurement.dtype,
            Measurement.time_median_s,
            configs.label("configs"),
        )
        .join(Measurement, Measurement.config_id == OperatorConfig.id)
        .where(*where)
        .order_by(rate.desc(), OperatorConfig.id, Measurement.id)
        .offset(offset)
        .limit(limit)
    ).all()
    return FastestWithin(
        int(rows[0][-1]) if rows else 0,
        [
            RateRow(int(i), str(k), str(op), f, int(b or 0), str(d), float(t))
            for i, k, op, f, b, d, t, _ in rows
        ],
    )


def imported_kernels(
    session: Session,
    kind_id: int,
    config_ids: Sequence[int],
    *,
    timing: str = "eager",
    cache_mode: str = "warm",
) -> dict[int, tuple[str, ...]]:
    """Return the kernel names the newest imported result of each configuration records.

    For the configurations ``config_ids`` on kind ``kind_id`` (with the ``timing`` and
    ``cache_mode`` given), the result :func:`~operator_db.db.queries.config_figures` chooses
    among imported ones (``source_id`` set; the newest ``created_at``, then the highest id):
    its provenance's ``kernel`` (the launched kernel that matched the op) and ``kernels`` (every
    kernel of the call, where it launched several), lower-cased, each once, in that order. A
    configuration whose result names none has no entry; operator-db's own results record no
    kernel. Only the two provenance fields are read, in chunks of the ids: the cost follows the
    ids asked for (the points above every roof), not the kind's results.
    """
    ids = sorted(set(config_ids))
    newest: dict[int, tuple[str, ...]] = {}
    kernel = Measurement.provenance["kernel"].as_string()
    kernels = Measurement.provenance["kernels"]
    for start in range(0, len(ids), _CHUNK):
        rows = session.execute(
            select(Measurement.config_id, kernel, kernels)
            .where(
                Measurement.device_kind_id == kind_id,
                Measurement.config_id.in_(ids[start : start + _CHUNK]),
                Measurement.source_id.is_not(None),
                Measurement.timing == timing,
                Measurement.cache_mode == cache_mode,
            )
            .order_by(Measurement.config_id, Measurement.created_at, Measurement.id)
        )
        for config_id, one, several in rows:  # the newest of a configuration comes last
            names = [one] if isinstance(one, str) else []
            if isinstance(several, list):
                names += [k for k in several if isinstance(k, str)]
            newest[int(config_id)] = tuple(dict.fromkeys(n.lower() for n in names if n))
    return {config_id: names for config_id, names in newest.items() if names}
