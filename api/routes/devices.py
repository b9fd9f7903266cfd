"""Device kinds, their hosts and peaks."""

from __future__ import annotations

import math

from fastapi import APIRouter

from api.deps import ReadSessionDep
from api.routes.common import READ
from api.schemas import DeviceKindDetail, DeviceKindOut, HostOut, PeakOut, PredictorOut
from operator_db.db import queries
from operator_db.db.models import DeviceKind, Host

router = APIRouter(tags=["devices"], dependencies=READ)


def _kind_out(kind: DeviceKind) -> DeviceKindOut:
    return DeviceKindOut.model_validate(kind, from_attributes=True)


def _host_out(host: Host, kind_name: str) -> HostOut:
    return HostOut.model_validate(
        {
            **{f: getattr(host, f) for f in HostOut.model_fields if f != "device_kind"},
            "device_kind": kind_name,
        }
    )


@router.get("/device-kinds")
def list_device_kinds(session: ReadSessionDep) -> list[DeviceKindOut]:
    """List the device kinds (a chip each; workers register theirs), by name."""
    return [_kind_out(k) for k in queries.device_kinds(session)]


@router.get("/device-kinds/{name}")
def get_device_kind(name: str, session: ReadSessionDep) -> DeviceKindDetail:
    """Return a device kind with its registered hosts and its stored peaks."""
    kind = queries.get_device_kind(session, name)
    hosts = [_host_out(h, kind.name) for h in queries.list_hosts(session, kind_id=kind.id)]
    peaks = [
        PeakOut.model_validate(p, from_attributes=True) for p in queries.peak_rows(session, kind.id)
    ]
    return DeviceKindDetail(**_kind_out(kind).model_dump(), hosts=hosts, peaks=peaks)


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
