"""docs/architecture.md holds: who imports whom, SQL only in db/, no module over 500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "operator_db"

ALLOWED: dict[str, set[str]] = {
    "config": set(),
    "errors": set(),
    "examples": set(),
    "specs": {"errors"},
    "ops": {"errors", "specs"},
    "devices": {"config", "errors"},
    "harvest": {"errors", "ops", "specs"},
    "measure": {"config", "devices", "errors", "harvest", "ops", "specs"},
    "db": {"config", "errors", "specs"},
    "estimate": {"db", "errors", "measure", "specs"},
    "worker": {"db", "devices", "errors", "measure", "ops", "specs"},
    "doctor": {"config", "db", "devices", "errors", "measure"},
    "study": {
        "config",
        "db",
        "devices",
        "errors",
        "estimate",
        "harvest",
        "measure",
        "ops",
        "specs",
        "worker",
    },
}
"""Which of the package's parts each part may import (docs/architecture.md); cli/ may import all."""


def _layer(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = (
            [node.module]
            if isinstance(node, ast.ImportFrom) and node.module
            else [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else []
        )
        for name in names:
            parts = name.split(".")
            if parts[0] == "operator_db" and len(parts) > 1:
                found.add(parts[1])
    return found


SOURCES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layers(path: Path) -> None:
    layer = _layer(path)
    if layer in ("cli", "__init__", "__main__"):
        return
    wrong = {t for t in _imports(path) if t != layer and t not in ALLOWED[layer]}
    assert not wrong, f"{path.relative_to(ROOT)} ({layer}) imports {sorted(wrong)}"


def test_sql_is_built_only_in_db() -> None:
    api = sorted((ROOT / "api").rglob("*.py"))
    outside_db = [p for p in SOURCES if _layer(p) != "db"] + api
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in outside_db
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "select(" in line
    ]
    assert found == []


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in [*SOURCES, *sorted((ROOT / "api").rglob("*.py"))]
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > 500
    }
    assert long == {}
