"""The lock (requirements/*.txt, written by scripts/lock.sh): complete, hashed, one version each.

Every requirement of pyproject.toml, of every extra, is pinned within its range for Python 3.11
and 3.12; every pin carries hashes; torch and its CUDA libraries are in no file; each smaller
file takes its versions from dev.txt; and the environment running the tests is the lock.
"""

from __future__ import annotations

import importlib.metadata
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers import REPO, load_lockfile

lockfile = load_lockfile()
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
LOCKS = {
    "dev": ["dev"],
    "runtime": [],
    "worker": ["gpu"],
    "gpu-host": ["gpu", "models", "plot", "test"],
}
"""Each lock file and the extras it is resolved for (scripts/lock.sh)."""
PYTHONS = ["3.11", "3.12"]


def pins(lock: str) -> list:  # type: ignore[type-arg]
    return lockfile.read_lock(REPO / "requirements" / f"{lock}.txt")  # type: ignore[no-any-return]


def requirements(extras: list[str]) -> list[Requirement]:
    """The project's requirements with these extras, self-references (operator-db[x]) expanded."""
    found = [Requirement(r) for r in PROJECT["dependencies"]]
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in PROJECT["optional-dependencies"][extra]:
            requirement = Requirement(text)
            if canonicalize_name(requirement.name) == "operator-db":
                todo.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("lock", LOCKS)
def test_every_requirement_is_pinned_within_its_range(lock: str, python: str) -> None:
    locked = {p.name: p.version for p in lockfile.select(pins(lock), python)}
    environment = lockfile.target_environment(python)
    for requirement in requirements(LOCKS[lock]):
        name = canonicalize_name(requirement.name)
        if name == "torch":
            assert name not in locked
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        assert name in locked, f"{name} is not in requirements/{lock}.txt: run scripts/lock.sh"
        assert requirement.specifier.contains(locked[name], prereleases=True), (
            f"{lock}.txt pins {name}=={locked[name]}, outside {requirement}: run scripts/lock.sh"
        )


@pytest.mark.parametrize("python", PYTHONS)
def test_one_python_gets_one_version_of_each_package(python: str) -> None:
    for lock in LOCKS:
        chosen = [p.name for p in lockfile.select(pins(lock), python)]
        assert len(chosen) == len(set(chosen)), lock


@pytest.mark.parametrize("lock", [name for name in LOCKS if name != "dev"])
def test_a_package_has_the_version_of_dev_txt_in_every_file(lock: str) -> None:
    dev = {(p.name, p.version, str(p.marker)) for p in pins("dev")}
    for pin in pins(lock):
        assert (pin.name, pin.version, str(pin.marker)) in dev, (lock, pin.name, pin.version)


@pytest.mark.parametrize("lock", LOCKS)
def test_every_pin_is_hashed_and_torch_is_left_out(lock: str) -> None:
    for pin in pins(lock):
        assert pin.hashes and all(h.startswith("sha256:") and len(h) == 71 for h in pin.hashes)
        assert not lockfile.NEVER.match(pin.name), f"{pin.name} must stay out of the lock"
    assert "nvidia-ml-py" in {p.name for p in pins(lock)} or lock == "runtime"


def test_the_environment_running_the_tests_is_the_lock() -> None:
    stamp = Path(sys.prefix) / ".opdb-installed"  # scripts/bootstrap.sh's; "latest ..." there
    if stamp.exists() and stamp.read_text().startswith("latest"):
        pytest.skip("bash scripts/test.sh --latest: the newest releases, not the lock, on purpose")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    off = {}
    for pin in lockfile.select(pins("dev"), python):
        installed = importlib.metadata.version(pin.name)
        if installed != pin.version:
            off[pin.name] = (pin.version, installed)
    assert off == {}, "installed versions differ from the lock: run bash scripts/bootstrap.sh"


def test_select_evaluates_markers_for_the_target_and_leaves_out_what_the_host_has(
    tmp_path: Path,
) -> None:
    lock = tmp_path / "x.txt"
    lock.write_text(
        "# a comment\n"
        "numpy==2.4.6 ; python_full_version < '3.12' \\\n    --hash=sha256:" + "a" * 64 + "\n"
        "numpy==2.5.5 ; python_full_version >= '3.12' \\\n    --hash=sha256:" + "b" * 64 + "\n"
        "colorama==0.4.6 ; sys_platform == 'win32' \\\n    --hash=sha256:" + "c" * 64 + "\n"
        "Typing_Extensions==4.16.0 \\\n    --hash=sha256:" + "d" * 64 + "\n    # via x\n"
    )
    read = lockfile.read_lock(lock)
    assert [p.line().split()[0] for p in lockfile.select(read, "3.11")] == [
        "numpy==2.4.6",
        "typing-extensions==4.16.0",
    ]
    assert [p.line() for p in lockfile.select(read, "3.12")][0] == (
        "numpy==2.5.5 --hash=sha256:" + "b" * 64
    )
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("typing_extensions==4.12.0\n# x\n-e git+https://example/x\nNumPy\n")
    assert lockfile.names_in(freeze) == {"typing-extensions", "numpy"}
    assert lockfile.select(read, "3.12", lockfile.names_in(freeze)) == []


def test_a_line_without_a_hash_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "x.txt"
    lock.write_text("numpy==2.4.6\n")
    with pytest.raises(ValueError, match="not a hashed pin: numpy==2.4.6"):
        lockfile.read_lock(lock)
