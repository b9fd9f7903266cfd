"""The wheel carries the example specs, the migrations and the chip table, and the code finds
them there: installed from it, ``opdb`` needs no checkout (docs/researcher.md, "Installing from a
wheel")."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if build.returncode != 0 and "hatchling" in build.stderr and "No matching" in build.stderr:
        pytest.skip("no package index to fetch the build backend (hatchling) from")
    assert build.returncode == 0, build.stderr
    [found] = out.glob("operator_db-*.whl")
    return found


def test_the_wheel_holds_the_specs_the_migrations_and_the_chips(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    specs = {f"operator_db/_specs/{p.name}" for p in (ROOT / "measurement_specs").glob("*.yaml")}
    versions = {
        f"operator_db/_migrations/versions/{p.name}"
        for p in (ROOT / "migrations" / "versions").glob("*.py")
    }
    assert specs and versions
    assert specs | versions <= names
    assert {
        "operator_db/_migrations/env.py",
        "operator_db/_migrations/script.py.mako",
        "operator_db/roofline/peaks.yaml",
        "api/app.py",
    } <= names
    assert not any(name.startswith(("tests/", "bench/", "docs/")) for name in names)
    [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "opdb = operator_db.cli.main:entry" in text


def test_installed_from_the_wheel_it_finds_them_and_migrates(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # a pure-Python wheel unpacked is its installed layout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = (
        "from operator_db.cli.demo import example_specs_dir\n"
        "from operator_db.cli.main import main\n"
        "from operator_db.db.migrate import migrations_dir\n"
        "import operator_db\n"
        "print(operator_db.__file__, example_specs_dir(), migrations_dir(), sep='\\n')\n"
        f"raise SystemExit(main(['db', 'upgrade', '--db', 'sqlite:///{elsewhere}/x.sqlite']))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script],
        cwd=elsewhere,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    module, specs, migrations = run.stdout.splitlines()[:3]
    assert module == str(site / "operator_db" / "__init__.py")
    assert specs == str(site / "operator_db" / "_specs")
    assert migrations == str(site / "operator_db" / "_migrations")
    assert (elsewhere / "x.sqlite").stat().st_size > 0
