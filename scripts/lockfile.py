"""Read the lock (requirements/*.txt, written by scripts/lock.sh) and select pins for a target.

    python scripts/lockfile.py select requirements/gpu-host.txt --python 3.12 [--have FILE]
                                      [--only NAME ...]
    python scripts/lockfile.py versions requirements/gpu-host.txt [--kit DIR]

``select`` prints the pins that apply to CPython ``--python`` on Linux x86-64, markers evaluated
and dropped, each with its hashes, in pip's format (``pip download --require-hashes -r -``).
``--have FILE`` (a GPU host's ``pip freeze``, or one name per line) leaves out the packages the
host already has, whatever their version; ``--only`` keeps just the names given (the build backend
for scripts/images.sh). ``versions`` prints, for this interpreter, each pin's
locked version beside the one it imports and whether that came from the kit's folder or the host.
Standard library and ``packaging`` only: it runs wherever pip does.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import re
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name

NEVER = re.compile(r"^(torch|triton|cuda-.*|nvidia-(?!ml-py$).*)$")
"""Packages no lock file holds: torch (a host brings its own) and the CUDA libraries it pulls in."""


@dataclass(frozen=True)
class Pin:
    """One locked requirement: ``name==version``, its marker (or None) and its sha256 hashes."""

    name: str
    version: str
    marker: Marker | None
    hashes: tuple[str, ...]

    def applies(self, python: str) -> bool:
        """Whether the pin applies to CPython ``python`` (``"3.12"``) on Linux x86-64."""
        return self.marker is None or self.marker.evaluate(target_environment(python))

    def line(self) -> str:
        """Return the pin as one line of pip's requirements format, without its marker."""
        return " ".join([f"{self.name}=={self.version}", *(f"--hash={h}" for h in self.hashes)])


def target_environment(python: str) -> dict[str, str]:
    """Return the marker environment of CPython ``python`` (major.minor) on Linux x86-64."""
    return {
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "os_name": "posix",
        "platform_machine": "x86_64",
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": f"{python}.0",
        "python_version": python,
        "sys_platform": "linux",
    }


def read_lock(path: Path) -> list[Pin]:
    """Return the pins of a lock file in its order.

    Raises:
        ValueError: a requirement that is not ``name==version`` with at least one hash.
    """
    pins: list[Pin] = []
    logical = re.sub(r"\\\n", " ", path.read_text())  # continuation lines joined
    for raw in logical.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        hashes = tuple(w.removeprefix("--hash=") for w in words if w.startswith("--hash="))
        rest = " ".join(w for w in words if not w.startswith("--hash="))
        requirement, _, marker = rest.partition(";")
        name, sep, version = requirement.strip().partition("==")
        if not sep or not hashes:
            raise ValueError(f"{path}: not a hashed pin: {line[:120]}")
        pins.append(
            Pin(
                canonicalize_name(name),
                version.strip(),
                Marker(marker.strip()) if marker.strip() else None,
                hashes,
            )
        )
    return pins


def names_in(path: Path) -> set[str]:
    """Return the package names of a ``pip freeze`` (or one name per line), canonicalized."""
    found: set[str] = set()
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            found.add(canonicalize_name(re.split(r"[=<>!~ @;\[]", line, maxsplit=1)[0]))
    return found


def select(pins: list[Pin], python: str, have: Collection[str] = ()) -> list[Pin]:
    """Return the pins for CPython ``python`` on Linux x86-64, less the names in ``have``."""
    return [p for p in pins if p.applies(python) and p.name not in have]


def versions(pins: list[Pin], kit: Path | None) -> list[tuple[str, str, str, str]]:
    """Return (name, locked, running, from) per pin: what this interpreter imports, and whence.

    ``from`` is ``kit`` for a distribution installed under ``kit`` (scripts/gpu-validate.sh's
    folder), ``host`` for one the interpreter had, ``missing`` for none.
    """
    rows = []
    for pin in pins:
        try:
            dist = importlib.metadata.distribution(pin.name)
        except importlib.metadata.PackageNotFoundError:
            rows.append((pin.name, pin.version, "-", "missing"))
            continue
        where = Path(str(dist.locate_file(""))).resolve()
        inside = kit is not None and where.is_relative_to(kit.resolve())
        rows.append((pin.name, pin.version, dist.version, "kit" if inside else "host"))
    return rows


def _torch() -> str:
    """Return torch's version, CUDA and first device, or why there is none."""
    try:
        import torch
    except ImportError as exc:
        return f"no torch ({exc})"
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}), {device}"


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code (1: the lock holds a package it must not)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    pick = commands.add_parser("select", help="the pins of a lock file for one target")
    pick.add_argument("lock", type=Path)
    pick.add_argument("--python", default="3.12", help="CPython major.minor (default 3.12)")
    pick.add_argument("--have", type=Path, help="names the host has already (pip freeze)")
    pick.add_argument("--only", nargs="+", metavar="NAME", help="just these packages")
    seen = commands.add_parser("versions", help="locked against running versions, and whence")
    seen.add_argument("lock", type=Path)
    seen.add_argument("--kit", type=Path, help="the folder the kit's wheels went to")
    args = parser.parse_args(argv)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    if args.command == "versions":
        rows = versions(select(read_lock(args.lock), python), args.kit)
        print(f"python {platform.python_version()}, {_torch()}")
        print(f"{'package':<24} {'locked':<20} {'running':<20} from")
        for name, locked, running, source in rows:
            mark = "" if running in ("-", locked) else "  (not the lock's)"
            print(f"{name:<24} {locked:<20} {running:<20} {source}{mark}")
        return 0
    have = names_in(args.have) if args.have else set()
    chosen = select(read_lock(args.lock), args.python, have)
    if args.only:
        only = {canonicalize_name(name) for name in args.only}
        chosen = [p for p in chosen if p.name in only]
    never = [p.name for p in chosen if NEVER.match(p.name)]
    if never:
        print(f"error: {args.lock} holds {', '.join(never)}: run scripts/lock.sh", file=sys.stderr)
        return 1
    print("\n".join(p.line() for p in chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
