"""docs/architecture.md holds: who imports whom, SQL only in db/, no module over 500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "operator_db"

ALLOWED: dict[str, set[str]] = {
    "config": {"config_env", "config_measure", "errors"},
    "config_env": set(),
    "config_measure": set(),
    "errors": set(),
    "stats": set(),
    "examples": set(),
    "specs": {"stats", "errors"},
    "ops": {"stats", "errors", "specs"},
    "devices": {"stats", "config", "errors"},
    "harvest": {"stats", "errors", "ops", "specs"},
    "measure": {"stats", "config", "devices", "errors", "harvest", "ops", "specs"},
    "db": {"stats", "config", "errors", "specs"},
    "roofline": {"stats", "db", "errors", "measure", "specs"},
    "estimate": {"stats", "db", "errors", "roofline", "specs"},
    "worker": {"stats", "db", "devices", "errors", "measure", "ops", "specs"},
    "doctor": {"stats", "config", "db", "devices", "errors", "measure"},
    "study": {
        "config",
        "stats",
        "db",
        "devices",
        "errors",
        "harvest",
        "measure",
        "ops",
        "roofline",
        "specs",
        "worker",
    },
    "datasets": {"stats", "config", "db", "errors", "harvest", "ops", "roofline", "specs"},
    "predict": {"stats", "db", "errors", "estimate", "roofline", "specs", "study"},
    "llm": {
        "config",
        "stats",
        "db",
        "devices",
        "errors",
        "estimate",
        "harvest",
        "measure",
        "ops",
        "predict",
        "roofline",
        "specs",
    },
    "report": {"stats", "db", "errors", "estimate", "llm", "predict", "roofline", "specs", "study"},
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


def test_the_layers_have_no_circle() -> None:
    """Each part's allowed imports reach back to it through no chain (a strict order)."""
    for start in ALLOWED:
        seen: set[str] = set()
        todo = list(ALLOWED[start])
        while todo:
            part = todo.pop()
            assert part != start, f"{start} can reach itself through {sorted(seen)}"
            if part not in seen:
                seen.add(part)
                todo.extend(ALLOWED[part])


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The project's modules ``path`` imports anywhere (in functions, under TYPE_CHECKING too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            candidates = [base, *(f"{base}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        found |= {c for c in candidates if c in modules}
    return found


def test_no_module_imports_itself_back() -> None:
    """No circle of modules, counting imports in functions and under TYPE_CHECKING."""
    paths = {_module(p): p for p in SOURCES}
    modules = set(paths)
    graph = {name: _imported_modules(path, modules) - {name} for name, path in paths.items()}
    # Packages import their own modules from __init__; a module importing its package's
    # __init__ is not a circle of ideas, so a package's edge to its own children is dropped.
    graph = {n: {m for m in deps if not n.startswith(m + ".")} for n, deps in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    assert circles == []


TORCH_FREE = (
    "config",
    "config_env",
    "config_measure",
    "errors",
    "stats",
    "specs",
    "db",
    "roofline",
    "estimate",
    "predict",
    "report",
)
"""Parts that never import torch at run time, nor a part that does (docs/architecture.md)."""
TORCH_FREE_MODULES = (
    "operator_db/study/analysis",
    "operator_db/study/sets.py",
    "operator_db/llm/compose.py",
    "operator_db/llm/memory.py",
    "operator_db/llm/estimate.py",
    "operator_db/llm/timings.py",
    "operator_db/llm/compare.py",
)
TORCH_PARTS = ("ops", "devices", "harvest", "measure", "worker", "doctor")
TORCH_MODULES = tuple(f"operator_db.llm.{m}" for m in ("steps", "runs", "harvest", "store"))
"""Modules of a mixed part (llm/) that load torch."""


def _top_level_imports(path: Path) -> set[str]:
    """Modules imported when ``path`` is: module-level imports, not under TYPE_CHECKING."""
    found: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


@pytest.mark.parametrize(
    "path",
    [
        p
        for p in SOURCES
        if _layer(p) in TORCH_FREE
        or any(str(p.relative_to(ROOT)).startswith(m) for m in TORCH_FREE_MODULES)
    ],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_torch_free_parts_do_not_load_torch(path: Path) -> None:
    heavy = {
        name
        for name in _top_level_imports(path)
        if name.split(".")[0] == "torch"
        or (name.startswith("operator_db.") and name.split(".")[1] in TORCH_PARTS)
        or name in TORCH_MODULES
    }
    assert heavy == set(), f"{path.relative_to(ROOT)} loads {sorted(heavy)} when imported"


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
