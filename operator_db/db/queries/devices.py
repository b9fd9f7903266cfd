"""Device kinds (a chip, e.g. one GPU model) and the hosts that measure them."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from operator_db.db.models import DeviceKind, FullModelRun, Host, Measurement, ModelOperator
from operator_db.errors import NotFoundError


def find_device_kind(session: Session, name: str) -> DeviceKind | None:
    """Return the device kind ``name``, or None."""
    return session.scalars(select(DeviceKind).where(DeviceKind.name == name)).one_or_none()


def get_device_kind(session: Session, name: str) -> DeviceKind:
    """Return the device kind ``name``.

    Raises:
        NotFoundError: no such kind; the message lists the known ones.
    """
    kind = find_device_kind(session, name)
    if kind is None:
        names = session.scalars(select(DeviceKind.name).order_by(DeviceKind.name)).all()
        known = ", ".join(names) if names else "none yet (a worker registers its kind)"
        raise NotFoundError(f"no device kind {name!r}; known: {known}")
    return kind


def get_or_create_device_kind(
    session: Session, name: str, device_type: str | None = None
) -> DeviceKind:
    """Return the device kind ``name``, creating it if new.

    A new kind's type is ``device_type``, else guessed from the name's prefix (``cpu:``,
    ``fake:``; anything else is a GPU). Flushes.
    """
    kind = find_device_kind(session, name)
    if kind is None:
        prefix = name.split(":", 1)[0]
        guessed = prefix if prefix in ("cpu", "fake") else "gpu"
        kind = DeviceKind(name=name, type=device_type or guessed)
        session.add(kind)
        session.flush()
    return kind


def device_kinds(session: Session, names: Sequence[str] | None = None) -> list[DeviceKind]:
    """Return the named device kinds (each once, in the order given), or all by name.

    Raises:
        NotFoundError: a named kind does not exist.
    """
    if names is not None:
        return [get_device_kind(session, name) for name in dict.fromkeys(names)]
    return list(session.scalars(select(DeviceKind).order_by(DeviceKind.name)))


def kinds_measuring_model(session: Session, model_id: int) -> set[str]:
    """Return the names of the device kinds with a result of the model or of its configurations."""
    configs = select(ModelOperator.config_id).where(ModelOperator.model_id == model_id)
    of_configs = session.scalars(
        select(DeviceKind.name)
        .join(Measurement, Measurement.device_kind_id == DeviceKind.id)
        .where(Measurement.config_id.in_(configs))
    )
    of_model = session.scalars(
        select(DeviceKind.name)
        .join(FullModelRun, FullModelRun.device_kind_id == DeviceKind.id)
        .where(FullModelRun.model_id == model_id)
    )
    return set(of_configs) | set(of_model)


def get_or_create_host(session: Session, hostname: str, device_id: str, kind_id: int) -> Host:
    """Return the host row of one device of one machine, creating it if new, on kind ``kind_id``.

    Flushes; the caller sets the host's details and commits.
    """
    host = session.scalars(
        select(Host).where(Host.hostname == hostname, Host.device_id == device_id)
    ).one_or_none()
    if host is None:
        host = Host(hostname=hostname, device_id=device_id, device_kind_id=kind_id)
        session.add(host)
    host.device_kind_id = kind_id
    session.flush()
    return host


def list_hosts(session: Session, *, kind_id: int | None = None) -> list[Host]:
    """Return the registered hosts (of one device kind, or all), most recently seen first."""
    query = select(Host).order_by(Host.last_seen.desc(), Host.id)
    if kind_id is not None:
        query = query.where(Host.device_kind_id == kind_id)
    return list(session.scalars(query))
