"""The GPU host kit's dry run on the fake device, end to end, with a tiny budget.

``scripts/gpu-validate.sh --dry-run`` runs ``opdb doctor`` and bench/bench_gpu.py, and leaves its
files flat in OUT. Every section must run and be written, in Markdown and JSON: ``pytest -m gpu``
(skipping here, without ``OPDB_REQUIRE_GPU``), the checks (GPU-only ones ``skipped: no CUDA``), and
the estimate, whose cases past the budget are skipped with the reason. The GPU tests collect with
the GPU host's locked set alone (requirements/gpu-host.txt).
"""

from __future__ import annotations

import ast
import gzip
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from tests.helpers import REPO
from tests.test_lock import pins

CHECKS = {
    "counter_vs_power",
    "energy_linearity",
    "eager_vs_window",
    "graph_vs_eager",
    "graph_failure",
    "oom_recovery",
}
FILES = [
    "gpu-validation.md",
    "gpu-validation.json",
    "gpu-validation-pytest.log",
    "gpu-validation-pytest.xml",
    "gpu-validation.sqlite.gz",
    "doctor.txt",
    "versions.txt",
]
"""What scripts/gpu-validate.sh leaves in OUT: fixed names, flat."""
GPU_ONLY = {"graph_vs_eager", "graph_failure", "oom_recovery"}


@pytest.mark.slow
def test_dry_run_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPDB_")}
    env["PYTHON"] = sys.executable
    env["OPDB_DATABASE_URL"] = f"sqlite:///{tmp_path / 'unused.sqlite'}"
    done = subprocess.run(
        [
            "bash",
            str(REPO / "scripts" / "gpu-validate.sh"),
            str(out),
            "--dry-run",
            "--",
            "--budget-s",
            "150",  # 30 s ran out under the parallel tests on a 2-core VM: checks were skipped
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "gpu-validation.json").read_text())
    markdown = (out / "gpu-validation.md").read_text()
    assert done.stdout.strip() == markdown.strip()
    assert report["dry_run"] is True
    assert report["device_type"] == "fake"
    sections = report["sections"]
    assert set(sections) == {"pytest", "checks", "estimate"}
    assert all(section["wall_s"] >= 0 for section in sections.values())

    pytest_run = sections["pytest"]
    assert pytest_run["require_gpu"] == 0
    assert pytest_run["counts"]["failed"] == 0
    assert pytest_run["counts"]["passed"] + pytest_run["counts"]["skipped"] >= 1

    checks = {c["name"]: c for c in sections["checks"]["checks"]}
    assert set(checks) == CHECKS
    for name in GPU_ONLY:
        assert checks[name]["status"] == "skipped"
        assert checks[name]["reason"] == "skipped: no CUDA"
    ran = 0
    for name in CHECKS - GPU_ONLY:  # real figures of the fake device, no GPU target applied
        if checks[name]["status"] == "skipped":  # a loaded machine can spend the tiny budget
            assert checks[name]["reason"].startswith("skipped: budget"), checks[name]
            continue
        assert checks[name]["status"] == "info", checks[name]
        assert checks[name]["figures"]["verdict"] in ("pass", "fail")
        ran += 1
    assert ran >= 1 and checks["counter_vs_power"]["status"] == "info"
    windows = checks["counter_vs_power"]["figures"]
    assert len(windows["idle"]) == 2 and len(windows["matmul"]) == 2
    assert windows["matmul"][1]["calls"] == 2 * windows["matmul"][0]["calls"]

    estimate = sections["estimate"]
    cases = estimate["cases"]
    assert len(cases) == 8
    assert {c["batch"] for c in cases} == {1, 2}
    for case in cases:
        assert case["status"] in ("done", "skipped"), case
        if case["status"] == "skipped":
            assert case["reason"].startswith("budget:")
        else:
            assert case["estimate_s"] > 0 and case["measured_s"] > 0
    assert estimate["settings_overrides"]["energy"] is False

    for heading in ("**Dry run**", "## 1. `pytest -m gpu`", "## 2. Checks", "## 3. Interleaved"):
        assert heading in markdown
    assert "skipped: no CUDA" in markdown
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert "torch" in (out / "versions.txt").read_text()
    assert "fake" in (out / "doctor.txt").read_text()
    with gzip.open(out / "gpu-validation.sqlite.gz") as db:
        assert db.read(16) == b"SQLite format 3\x00"


def _gpu_tests() -> tuple[str, ...]:
    tree = ast.parse((REPO / "bench" / "bench_gpu.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "GPU_TESTS":
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("bench/bench_gpu.py has no GPU_TESTS")


GPU_MARK = re.compile(r"^(pytestmark = pytest\.mark\.gpu|\s*@pytest\.mark\.gpu)\b", re.M)


def test_the_bench_collects_every_gpu_test() -> None:
    marked = {
        path.relative_to(REPO).as_posix()
        for path in (REPO / "tests").rglob("test_*.py")
        if GPU_MARK.search(path.read_text())
    }
    assert marked == set(_gpu_tests())


BLOCKER = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class _Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is not in requirements/gpu-host.txt")
        return None
sys.meta_path.insert(0, _Blocker())
"""


@pytest.mark.slow
def test_the_gpu_tests_collect_with_the_gpu_host_set_alone(tmp_path: Path) -> None:
    """What bench_gpu.py collects imports nothing a GPU host is not given (schemathesis, ...)."""
    dev, host = ({p.name for p in pins(lock)} for lock in ("dev", "gpu-host"))
    absent = dev - host
    blocked = sorted(
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if all(canonicalize_name(d) in absent for d in dists)
    )
    assert {"schemathesis", "hypothesis", "httpx"} <= set(blocked)
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(blocked=blocked))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPDB_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # a host has no hypothesis plugin to load
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        + ["-p", "pytest_mock", "-m", "gpu", *_gpu_tests()],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " tests collected" in done.stdout or " selected" in done.stdout


@pytest.mark.slow
def test_the_llm_device_call_dry_run(tmp_path: Path) -> None:
    """``scripts/gpu-llm.sh --dry-run``: issue 44's GPU call on the fake device (a tied-head
    Llama), every step run, its files flat in OUT, the estimate against the runs with energy."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPDB_")}
    env["PYTHON"] = sys.executable
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu-llm.sh"), str(out), "--dry-run", "--budget-s", "240"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            "session.log", "peaks.log", "harvest.log", "measure-b1.log", "measure-b8.log",
            "estimate.txt", "estimate.json", "compare.txt", "llm-gpu.sqlite.gz",
        ]
    )  # fmt: skip
    rows = json.loads((out / "estimate.json").read_text())
    assert [(r["batch"], r["prompt"], r["new_tokens"]) for r in rows] == [(1, 16, 4), (8, 16, 4)]
    for r in rows:  # J/token against the runs, or why there is none: the fake device's step
        # energies are noise around zero, which a loaded host can sum below 0 J (CI, batch 8)
        said = any(n.startswith(("no energy: ", "no energy error: ")) for n in r["notes"])
        assert said or r["errors"].get("energy", {}).get("verdict"), r["notes"]
    assert gzip.decompress((out / "llm-gpu.sqlite.gz").read_bytes())[:15] == b"SQLite format 3"
