"""Device kinds (with their chip's spec sheet and the sources of their results), hosts, peaks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter

from api.deps import ReadSessionDep
from api.routes.common import READ
from api.routes.sources import MEASURED, result_counts
from api.schemas import (
    ChipSpecOut,
    DeviceKindDetail,
    DeviceKindOut,
    HostOut,
    KindSourceOut,
    PeakOut,
    PredictorOut,
)
from operator_db.db import queries
from operator_db.db.models import DataSource, DeviceKind, Host
from operator_db.roofline.chips import chip_spec

router = APIRouter(tags=["devices"], dependencies=READ)


def _spec_out(name: str) -> ChipSpecOut | None:
    chip = chip_spec(name)
    if chip is None:
        return None
    return ChipSpecOut(
        **chip.model_dump(
            include={
                "name",
                "category",
                "vendor",
                "sms",
                "cores_per_sm",
                "cores",
                "boost_clock_mhz",
                "base_clock_mhz",
                "compute_capability",
                "board_power_w",
                "memory_type",
                "memory_bandwidth_bytes_per_s",
                "peak_flops_per_s",
                "source",
                "notes",
            }
        ),
        memory_bytes=None if chip.memory_bytes is None else round(chip.memory_bytes),
        l2_cache_bytes=None if chip.l2_cache_bytes is None else round(chip.l2_cache_bytes),
    )


def _data_set_view(view: Any) -> dict[str, Any]:
    """Return a data set's own view of a device (``device_kinds.info[name]``) as fields."""
    if not isinstance(view, dict):
        return {}
    corrections = view.get("corrections")
    return {
        "device": view.get("config"),
        "corrected": view.get("corrected"),
        "corrections": {str(k): str(v) for k, v in (corrections or {}).items()},
    }


def _sources_out(
    kind: DeviceKind, counts: Sequence[queries.SourceCount], sources: dict[int, DataSource]
) -> list[KindSourceOut]:
    """Own results first, then each data set with results on the kind or a view of it, by name."""
    held = {c.source_id: c for c in counts}
    out = []
    own = held.get(None)
    if own is not None:
        out.append(
            KindSourceOut(
                source=MEASURED, imported=False, results=own.results, model_runs=own.model_runs
            )
        )
    info = kind.info or {}
    for source in sorted(sources.values(), key=lambda s: s.name):
        count = held.get(source.id)
        if count is None and source.name not in info:
            continue
        out.append(
            KindSourceOut(
                source=source.name,
                imported=True,
                results=count.results if count else 0,
                model_runs=count.model_runs if count else 0,
                title=source.title,
                version=source.version,
                license=source.license,
                url=source.url,
                method=source.method,
                **_data_set_view(info.get(source.name)),
            )
        )
    return out


def _kind_out(
    kind: DeviceKind, counts: Sequence[queries.SourceCount], sources: dict[int, DataSource]
) -> DeviceKindOut:
    return DeviceKindOut(
        name=kind.name,
        type=kind.type,
        vendor=kind.vendor,
        architecture=kind.architecture,
        memory_bytes=kind.memory_bytes,
        spec=_spec_out(kind.name),
        sources=_sources_out(kind, counts, sources),
    )


def _host_out(host: Host, kind_name: str) -> HostOut:
    return HostOut.model_validate(
        {
            **{f: getattr(host, f) for f in HostOut.model_fields if f != "device_kind"},
            "device_kind": kind_name,
        }
    )


@router.get("/device-kinds")
def list_device_kinds(session: ReadSessionDep) -> list[DeviceKindOut]:
    """List the device kinds (a chip each; workers and imports register them), by name.

    Each with its chip's spec sheet where known, and the sources of its results: own
    measurements, and each data set it was imported from with its provenance, counts and view of
    the device.
    """
    sources = {s.id: s for s in queries.data_sources(session)}
    counts: dict[int, list[queries.SourceCount]] = {}
    for count in result_counts(session):
        counts.setdefault(count.device_kind_id, []).append(count)
    return [_kind_out(k, counts.get(k.id, []), sources) for k in queries.device_kinds(session)]


@router.get("/device-kinds/{name}")
def get_device_kind(name: str, session: ReadSessionDep) -> DeviceKindDetail:
    """Return a device kind with its spec sheet, sources, registered hosts and stored peaks."""
    kind = queries.get_device_kind(session, name)
    sources = {s.id: s for s in queries.data_sources(session)}
    counts = queries.source_counts(session, kind_id=kind.id)
    hosts = [_host_out(h, kind.name) for h in queries.list_hosts(session, kind_id=kind.id)]
    peaks = [
        PeakOut.model_validate(p, from_attributes=True) for p in queries.peak_rows(session, kind.id)
    ]
    return DeviceKindDetail(
        **_kind_out(kind, counts, sources).model_dump(), hosts=hosts, peaks=peaks
    )


@router.get("/device-kinds/{name}/predictors")
def list_predictors(name: str, session: ReadSessionDep) -> list[PredictorOut]:
    """List the kind's stored cost models, newest version first (`opdb predict train`)."""
    kind = queries.get_device_kind(session, name)
    return [
        PredictorOut(
            version=p.version,
            op=p.op,
            target=p.target,
            samples=p.samples,
            estimator=str(p.library.get("estimator", "")),
            cv_median_error=p.cv_median_error,
            level=p.level,
            interval_factor=math.exp(min(p.interval_ln, 700.0)),
            data_hash=p.data_hash,
            trained_at=p.created_at,
            library=p.library,
        )
        for p in queries.list_predictors(session, [kind.id])
    ]


@router.get("/hosts")
def list_hosts(session: ReadSessionDep) -> list[HostOut]:
    """List the registered hosts (one device of one machine each), most recently seen first."""
    kinds = {k.id: k.name for k in queries.device_kinds(session)}
    return [_host_out(h, kinds.get(h.device_kind_id, "")) for h in queries.list_hosts(session)]
