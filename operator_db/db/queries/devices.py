"""Device kinds (a chip, e.g. one GPU model) and the hosts that measure them."""

from __future__ import annotations

import functools
import sys
import unicodedata
from collections.abc import Callable, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from operator_db.db.models import DeviceKind, FullModelRun, Host, Measurement, ModelOperator
from operator_db.errors import ConflictError, InvalidInputError, NotFoundError
from operator_db.specs.text import CATEGORIES, NOT_IN_TEXT, skeleton


def find_device_kind(session: Session, name: str) -> DeviceKind | None:
    """Return the device kind ``name``, or None."""
    return session.scalars(select(DeviceKind).where(DeviceKind.name == name)).one_or_none()


_KNOWN_SHOWN = 10
"""Known kinds named in a not-found message; the rest are counted."""
MAX_KIND_NAME = 200
"""Longest device kind name, in characters (the column's width)."""
NOT_IN_NAMES = NOT_IN_TEXT
"""Unicode categories no new name holds (``specs/text.py``'s rule for every stored text):
controls, formats (bidi overrides, zero-width characters), line and paragraph separators,
private use and surrogates. Unassigned code points (Cn) are not refused: their ~700 ranges would
make the schema's pattern 30 kB and too slow for tools that generate names from it (Hypothesis),
and they differ between Python versions."""


def _ranges(inside: Callable[[str], bool]) -> str:
    """Return the code points for which ``inside`` holds as a regex class body of ranges."""
    parts: list[str] = []
    start: int | None = None
    for point in range(sys.maxunicode + 2):
        if point <= sys.maxunicode and inside(chr(point)):
            start = point if start is None else start
        elif start is not None:
            first, last = _escaped(start), _escaped(point - 1)
            parts.append(first if start == point - 1 else f"{first}-{last}")
            start = None
    return "".join(parts)


def _escaped(point: int) -> str:
    return f"\\u{point:04x}" if point <= 0xFFFF else f"\\U{point:08x}"


def _not_allowed(char: str) -> bool:
    return char == "/" or unicodedata.category(char) in NOT_IN_NAMES


@functools.cache
def kind_name_pattern() -> str:
    """Return a device kind's name rule as a regex (the API's schema states it so).

    ``check_device_kind_name``'s rule: printable characters only, no ``/``, no space at either
    end (surrogates, which the check refuses, are left out: JSON text as UTF-8 cannot carry one,
    and Rust's regex, the schema's validators', refuses a class that names them). Built from this
    Python's Unicode tables, in the escapes (u and U followed by hex digits) that Python's re and
    Rust's regex read; made once, when first asked for (a walk over every code point, 0.5 s:
    a command that names no kind does not pay it).
    """
    bad = _ranges(lambda c: _not_allowed(c) and unicodedata.category(c) != "Cs")
    edge = _ranges(lambda c: unicodedata.category(c) == "Zs")
    return f"^[^{bad}{edge}](?:[^{bad}]*[^{bad}{edge}])?$"


def _short(name: str) -> str:
    return repr(name) if len(name) <= 80 else repr(name[:77] + "...")


def check_device_kind_name(name: str) -> str:
    """Return ``name`` if it can name a new device kind (``kind_name_pattern``, 200 characters).

    A name is shown on pages and terminals and fetched by URL (``/device-kinds/{name}``): it
    holds printable characters only (none of the categories ``NOT_IN_NAMES``: no control, bidi
    or zero-width character), no ``/`` (a URL's path could not hold it), and neither begins nor
    ends with white space. Kinds stored before this rule keep their names.

    Raises:
        InvalidInputError: the name is empty, too long, or breaks the rule (a one-line message
            naming the first character at fault).
    """
    if not name.strip():
        raise InvalidInputError("a device kind's name must not be empty")
    if len(name) > MAX_KIND_NAME:
        raise InvalidInputError(
            f"device kind name of {len(name)} characters, over the limit of {MAX_KIND_NAME}"
        )
    bad = next((c for c in name if _not_allowed(c)), None)
    if bad == "/":
        raise InvalidInputError(
            f"device kind {_short(name)} holds '/', which a URL's path cannot carry in a name"
        )
    if bad is not None:
        called = unicodedata.name(bad, "")
        raise InvalidInputError(
            f"device kind {_short(name)} holds {CATEGORIES[unicodedata.category(bad)]} "
            f"U+{ord(bad):04X}{f' ({called})' if called else ''}: names hold printable "
            "characters only"
        )
    if name != name.strip():
        raise InvalidInputError(f"device kind {_short(name)} begins or ends with white space")
    return name


def check_not_look_alike(session: Session, name: str) -> None:
    """Refuse a new kind's ``name`` that passes for a known kind's (``specs.text.skeleton``).

    Raises:
        ConflictError: naming the known kind it looks like (409: the name is well formed, and
            clashes with what is stored).
    """
    if find_device_kind(session, name) is not None:
        return
    shape = skeleton(name)
    for known in session.scalars(select(DeviceKind.name)):
        if skeleton(known) == shape:
            raise ConflictError(
                f"device kind {_short(name)} looks like the known {_short(known)} but is not it: "
                "name the known kind, or one that does not pass for it"
            )


def get_device_kind(session: Session, name: str) -> DeviceKind:
    """Return the device kind ``name``.

    Raises:
        NotFoundError: no such kind; the message lists the known ones.
    """
    kind = find_device_kind(session, name)
    if kind is None:
        names = session.scalars(
            select(DeviceKind.name).order_by(DeviceKind.name).limit(_KNOWN_SHOWN + 1)
        ).all()
        known = (
            ", ".join(names[:_KNOWN_SHOWN]) if names else "none yet (a worker registers its kind)"
        )
        if len(names) > _KNOWN_SHOWN:
            total = session.scalar(select(func.count()).select_from(DeviceKind)) or 0
            known += f" and {total - _KNOWN_SHOWN} more"
        raise NotFoundError(f"no device kind {_short(name)}; known: {known}")
    return kind


def get_or_create_device_kind(
    session: Session, name: str, device_type: str | None = None
) -> DeviceKind:
    """Return the device kind ``name``, creating it if new.

    A new kind's type is ``device_type``, else guessed from the name's prefix (``cpu:``,
    ``fake:``; anything else is a GPU). Flushes.

    Raises:
        InvalidInputError: a new kind's name is empty, too long or not printable.
    """
    kind = find_device_kind(session, name)
    if kind is None:
        check_device_kind_name(name)
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


def sole_device_kind(session: Session, name: str | None) -> str:
    """Return ``name``, or the only device kind stored where it is None.

    Raises:
        NotFoundError: no kind stored, or several (the message lists them).
    """
    if name is not None:
        return name
    kinds = [k.name for k in device_kinds(session)]
    if len(kinds) == 1:
        return kinds[0]
    raise NotFoundError(
        "no device kind in the database yet: measure something first"
        if not kinds
        else "several device kinds; choose with --device-kind: " + ", ".join(kinds)
    )


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


def host_cpu_label(session: Session, host_id: int | None) -> str | None:
    """Return one line naming a host's CPU (``Intel Xeon ..., 2 cores, 3500 MHz``), or None.

    Read from what the worker stored of the device's provenance (``host_cpu``: model, cores the
    process may use, clock); None for an unknown host or one registered before it was stored.
    """
    host = session.get(Host, host_id) if host_id is not None else None
    info = (host.info or {}).get("host_cpu") if host is not None else None
    if not isinstance(info, dict) or not info.get("model"):
        return None
    parts = [str(info["model"])]
    cores = info.get("usable_cores")
    if isinstance(cores, int | float):
        parts.append(f"{cores:g} cores")
    mhz = info.get("max_mhz")
    if isinstance(mhz, int | float):
        parts.append(f"{mhz:.0f} MHz")
    return ", ".join(parts)
