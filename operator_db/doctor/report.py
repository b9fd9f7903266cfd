"""What the doctor found: one :class:`Check` per row, and the report that decides the exit code.

A check is ``ok``, ``warn`` (measuring is right, but something is missing or worth a look) or
``fail`` (measuring here would give wrong numbers, or could not start). docs/doctor.md lists which
check fails and which warns, and when.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from operator_db.errors import OperatorDBError

Status = Literal["ok", "warn", "fail"]
STATUSES: tuple[Status, ...] = ("ok", "warn", "fail")


@dataclass(frozen=True)
class Check:
    """One row of the doctor's table.

    ``name`` is a stable key for programs (``energy_counter``, ``database``, ...), ``title`` what
    the table shows, ``value`` what was found (one line), ``action`` what to do about it (empty
    when nothing), ``data`` the figures behind the value, JSON-ready, in the units their keys name.
    """

    name: str
    title: str
    status: Status
    value: str
    action: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Return a JSON-ready copy."""
        return asdict(self)


def ok(name: str, title: str, value: str, action: str = "", /, **data: Any) -> Check:
    """Return a passing check."""
    return Check(name, title, "ok", value, action, data)


def warn(name: str, title: str, value: str, action: str = "", /, **data: Any) -> Check:
    """Return a warning: measuring is right, but something is missing or worth a look."""
    return Check(name, title, "warn", value, action, data)


def fail(name: str, title: str, value: str, action: str = "", /, **data: Any) -> Check:
    """Return a failure: measuring here would give wrong numbers, or could not start."""
    return Check(name, title, "fail", value, action, data)


def one_line(exc: BaseException) -> str:
    """Return an error's message on one line (its type where it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def guarded(name: str, title: str, check: Callable[[], list[Check]], action: str) -> list[Check]:
    """Run ``check``; a device, database, torch or OS error becomes one ``fail`` row saying why.

    A check that cannot read what it looks at cannot vouch for it, and the doctor goes on with the
    next check rather than ending in a traceback.
    """
    try:
        return check()
    except (OperatorDBError, RuntimeError, OSError) as exc:
        return [fail(name, title, one_line(exc), action)]


@dataclass(frozen=True)
class DoctorReport:
    """Every check the doctor ran, in table order, and how long it took (s)."""

    device: str
    """The device asked for (``auto``, ``cpu``, ``nvidia:0``, ``fake``)."""
    checks: tuple[Check, ...]
    elapsed_s: float

    def get(self, name: str) -> Check | None:
        """Return the check called ``name``, or None when it did not run."""
        return next((c for c in self.checks if c.name == name), None)

    @property
    def failed(self) -> tuple[Check, ...]:
        """The checks that failed."""
        return tuple(c for c in self.checks if c.status == "fail")

    @property
    def warnings(self) -> tuple[Check, ...]:
        """The checks that warned."""
        return tuple(c for c in self.checks if c.status == "warn")

    @property
    def exit_code(self) -> int:
        """0 when measuring here would be right (warnings allowed), 1 when a check failed."""
        return 1 if self.failed else 0

    def counts(self) -> dict[str, int]:
        """Return how many checks have each status."""
        return {s: sum(c.status == s for c in self.checks) for s in STATUSES}

    def as_dict(self) -> dict[str, Any]:
        """Return a JSON-ready copy: the verdict, the counts and every check."""
        return {
            "device": self.device,
            "ok": self.exit_code == 0,
            "exit_code": self.exit_code,
            "elapsed_s": round(self.elapsed_s, 3),
            "counts": self.counts(),
            "checks": [c.as_dict() for c in self.checks],
        }
