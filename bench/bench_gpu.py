"""Benchmark: validate operator-db on one NVIDIA GPU in under 9 minutes (project issue 11).

Three sections, each timed, written to ``gpu-validation.md`` and ``gpu-validation.json`` in
``--out`` (with the ``pytest`` log, its JUnit XML and the estimate's SQLite database):

1. ``pytest -m gpu`` with ``OPDB_REQUIRE_GPU=1``, as a subprocess: counts and the output's tail.
2. The review's checks over the library (``bench/gpu_checks.py``): counter vs integrated power
   (idle and a large matmul, 5 s and 10 s windows), energy linearity (N vs 2N calls), eager
   median vs the per-call time inside the energy windows, CUDA graph vs eager for a small op,
   recovery from a failed graph capture and from out-of-memory.
3. The interleaved estimate (``bench/gpu_estimate.py``) of ResNet-50, MobileNetV2, BERT-base and
   GPT-2 at batch 1 and 64, harvested on the fly from ``transformers:`` references: operators,
   host stage, estimate, measured model, error and the median absolute error.

Run on a GPU host, from an environment that already has a CUDA torch (docs/gpu.md):

    python bench/bench_gpu.py --out results/ [--budget-s 480]

and anywhere, on the fake device (or ``--device cpu``) with tiny sizes, to try it:

    python bench/bench_gpu.py --dry-run --out /tmp/gpu-dry [--budget-s 60]

Exit code 0 when every section ran and nothing failed, 1 when a check or section failed, 2 when
the benchmark cannot run here (no GPU without ``--dry-run``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import torch
from gpu_checks import Context, run_checks, with_overrides
from gpu_common import DRY_SIZES, GPU_SIZES, NO_CUDA, Budget, Sizes
from gpu_estimate import run_estimates
from gpu_report import render

from operator_db.config import get_settings
from operator_db.devices.cuda import cuda_unavailable_reason
from operator_db.devices.factory import open_device, parse_device_spec
from operator_db.devices.nvml import nvml_available

ROOT = Path(__file__).resolve().parent.parent
NAME = "gpu-validation"
GPU_TESTS = (
    "tests/devices/test_nvidia_gpu.py",
    "tests/measure/test_gpu.py",
    "tests/doctor/test_gpu.py",
)
"""The modules that hold every ``@pytest.mark.gpu`` test (tests/test_bench_gpu.py checks it)."""
TAIL_LINES = 40


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."), help="Folder for the results.")
    parser.add_argument(
        "--budget-s", type=float, default=480.0, help="Wall-clock budget, s (default 480)."
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="Tiny sizes on the fake device (or --device cpu): exercises every section here.",
    )
    parser.add_argument(
        "--device", default=None, help="nvidia[:N] (default), or with --dry-run fake (default)/cpu."
    )
    parser.add_argument(
        "--pytest-args",
        default="",
        help="Extra arguments for `pytest -m gpu`, one shell-quoted string; test paths there "
        "replace the GPU test modules.",
    )
    parser.add_argument(
        "--estimate-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a measure setting of the estimate section (JSON value), repeatable.",
    )
    return parser.parse_args(argv)


def _log_to_stderr(budget: Budget) -> Any:
    def log(message: str) -> None:
        print(f"[{budget.spent_s():6.1f} s] {message}", file=sys.stderr, flush=True)

    return log


def _overrides(items: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"error: --estimate-set {item!r}: expected KEY=VALUE")
        try:
            found[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            found[key.strip()] = value
    return found


def _junit_counts(path: Path) -> dict[str, int] | None:
    """Return passed/failed/errors/skipped from pytest's JUnit XML, or None without it."""
    if not path.exists():
        return None
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors")}
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    passed = total["tests"] - total["failures"] - total["errors"] - skipped
    return {
        "passed": passed,
        "failed": total["failures"],
        "errors": total["errors"],
        "skipped": skipped,
    }


def run_pytest(extra: str, require_gpu: bool, timeout_s: float, out: Path) -> dict[str, Any]:
    """Run ``pytest -m gpu`` in a subprocess from the repository root; return its figures.

    It collects only :data:`GPU_TESTS` (or the paths ``extra`` names), so that a dependency of
    other tests (the API's schemathesis, say) need not be on the GPU host.
    """
    junit, log_path = out / f"{NAME}-pytest.xml", out / f"{NAME}-pytest.log"
    junit.unlink(missing_ok=True)
    extra_args = shlex.split(extra)
    paths = [] if any(not a.startswith("-") for a in extra_args) else list(GPU_TESTS)
    args = ["-m", "pytest", "-m", "gpu", "-s", "-rA", "-p", "no:cacheprovider", *paths]
    cmd = [sys.executable, *args, f"--junitxml={junit}", *extra_args]
    env = dict(os.environ)
    if require_gpu:
        env["OPDB_REQUIRE_GPU"] = "1"
    else:
        env.pop("OPDB_REQUIRE_GPU", None)
    reason = None
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        output, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        parts = [
            p.decode() if isinstance(p, bytes) else (p or "") for p in (exc.stdout, exc.stderr)
        ]
        output, code = "".join(parts), None
        reason = f"timed out after {timeout_s:.0f} s"
    log_path.write_text(output)
    counts = _junit_counts(junit)
    if counts is None:
        result = "no results (pytest did not write its report)"
    else:
        result = ", ".join(f"{n} {k}" for k, n in counts.items())
    if reason or counts is None or counts["failed"] or counts["errors"] or code not in (0, 5):
        status = "fail"
    elif counts["passed"] == 0:
        status = "skipped"
        reason = f"{NO_CUDA}: the GPU tests skip here (run without OPDB_REQUIRE_GPU)"
    else:
        status = "pass"
    return {
        "command": shlex.join(["python", *args, *extra_args]),
        "require_gpu": int(require_gpu),
        "returncode": code,
        "counts": counts,
        "result": result,
        "status": status,
        "reason": reason,
        "log": str(log_path),
        "tail": output.splitlines()[-TAIL_LINES:],
    }


def _commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{head}{' (with local changes)' if dirty else ''}" if head else "unknown"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _failed(report: dict[str, Any]) -> bool:
    sections = report["sections"]
    bad = {"fail", "error"}
    return (
        sections["pytest"]["status"] in bad
        or any(c["status"] in bad for c in sections["checks"]["checks"])
        or sections["estimate"]["status"] in bad
        or any(c.get("status") == "error" for c in sections["estimate"].get("cases", []))
    )


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    budget = Budget(args.budget_s)
    log = _log_to_stderr(budget)
    sizes: Sizes = DRY_SIZES if args.dry_run else GPU_SIZES
    spec = args.device or ("fake" if args.dry_run else "nvidia")
    backend, _index = parse_device_spec(spec)
    estimate_overrides = {**sizes.estimate, **_overrides(args.estimate_set)}
    if not args.dry_run:
        ok, nvml_says = nvml_available()
        reason = (nvml_says if not ok else None) or cuda_unavailable_reason()
        if backend != "nvidia" or reason is not None:
            print(
                f"error: the full benchmark runs on an NVIDIA GPU "
                f"({reason or f'--device {spec}'}); --dry-run runs it on the fake device",
                file=sys.stderr,
            )
            return 2
    out: Path = args.out.resolve()  # pytest runs from the repository root
    out.mkdir(parents=True, exist_ok=True)
    if sizes.threads is not None:
        torch.set_num_threads(sizes.threads)
    settings = get_settings()
    if backend == "fake":  # a short counter period, so that sub-second windows lag little
        settings = settings.model_copy(update={"fake_update_period_s": 0.005})
    report: dict[str, Any] = {
        "benchmark": "bench/bench_gpu.py",
        "dry_run": args.dry_run,
        "device_spec": spec,
        "command": shlex.join(["python", "bench/bench_gpu.py", *(argv or sys.argv[1:])]),
        "commit": _commit(),
        "started_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "budget_s": args.budget_s,
        "sizes": sizes.__dict__,
        "sections": {},
    }
    log("1. pytest -m gpu")
    start = time.perf_counter()
    timeout = min(sizes.pytest_timeout_s, max(30.0, budget.left_s() / 2))
    pytest = run_pytest(args.pytest_args, not args.dry_run, timeout, out)
    pytest["wall_s"] = time.perf_counter() - start
    report["sections"]["pytest"] = pytest
    log(f"pytest: {pytest['status']}: {pytest['result']}")
    with open_device(spec, settings=settings) as device:
        identity = device.identity()
        report["device_type"] = identity.device_type
        report["environment"] = {
            "device_name": identity.name,
            "identity": identity.as_dict(),
            "provenance": device.provenance(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "transformers": _version("transformers"),
            "nvidia_ml_py": _version("nvidia-ml-py"),
            "python": platform.python_version(),
            "torch_threads": torch.get_num_threads(),
            "host": socket.gethostname(),
        }
        log(f"2. checks on {identity.name}")
        start = time.perf_counter()
        ctx = Context(device, sizes, settings.measure, budget, log, dry_run=args.dry_run)
        checks = run_checks(ctx)
        report["sections"]["checks"] = {
            "wall_s": time.perf_counter() - start,
            "base_settings": settings.measure.model_dump(),
            "checks": [c.as_dict() for c in checks],
        }
        log("3. interleaved estimate")
        start = time.perf_counter()
        if ctx.context_lost is not None:
            estimate: dict[str, Any] = {
                "status": "skipped",
                "reason": f"skipped: the CUDA context is lost ({ctx.context_lost})",
                "cases": [],
            }
        else:
            estimate = run_estimates(
                device,
                with_overrides(settings.measure, estimate_overrides),
                estimate_overrides,
                budget,
                dry_run=args.dry_run,
                db_path=out / f"{NAME}.sqlite",
                min_case_s=sizes.min_case_s,
                log=log,
            )
        estimate["wall_s"] = time.perf_counter() - start
        report["sections"]["estimate"] = estimate
    report["wall_s"] = budget.spent_s()
    (out / f"{NAME}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    markdown = render(report)
    (out / f"{NAME}.md").write_text(markdown)
    print(markdown)
    log(f"wrote {out / f'{NAME}.md'} and {out / f'{NAME}.json'}")
    return 1 if _failed(report) else 0


if __name__ == "__main__":
    sys.exit(main())
