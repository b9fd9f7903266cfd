"""Start-up time of ``opdb`` commands against bare Python and against importing torch (issue 13).

    .venv/bin/python bench/bench_startup.py [--runs 5] [--before OTHER_CHECKOUT]

Every case is a fresh process, timed from start to exit (wall clock); the cases take turns, one
round after another, so that a burst of load on the machine falls on all of them alike, and one
untimed round first warms the disk cache. Setup (a temporary SQLite database, ``mlp-small-b8``
ingested and measured on the fake device) is not timed.

Targets: a command that does not harvest ends at most 0.5 s after bare Python (``python -c pass``);
a harvest at most 1.5 × (importing torch and the model's zoo, ``python -c "import torch, ZOO"``)
+ 0.5 s; a worker on an empty queue (it starts, opens its device, registers, finds no job and
exits) as much over importing torch (issue 46). ``ratio`` is the median over the target's limit:
at most 1 meets it. ``--before`` adds the same ``opdb`` commands run on another checkout's code
(e.g. the main branch), in the same rounds.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from operator_db.config import FAST_FAKE_MEASURE

ROOT = Path(__file__).resolve().parent.parent

GPT2_ZOO = "import torch, transformers; transformers.GPT2Model"
"""transformers imports its models lazily: the zoo import of a GPT-2 harvest is its class."""
META_OP = "import torch; m = torch.ones(8, 8, device='meta'); torch.addmm(m, m, m)"
"""torch alone, running a Linear's op on the meta device as a harvest does: its first call runs
torch's Python decomposition, which imports torch._dynamo and sympy (not counted as the zoo)."""


@dataclass
class Case:
    """One command line, timed; ``limit`` names the target it is held to."""

    label: str
    argv: list[str]
    limit: str | None = None
    """``bare``: bare Python + 0.5 s; otherwise the label of the import its harvest is held to."""
    pythonpath: str | None = None
    """Where ``operator_db`` is imported from (default: this checkout)."""
    times: list[float] | None = None
    cpu: list[float] | None = None
    """User + system CPU seconds of the process: what a loaded machine inflates least."""


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _opdb(*args: str) -> list[str]:
    return [sys.executable, "-m", "operator_db", *args]


def _env(db_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPDB_")}
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + path if path else "")
    return {**env, "OPDB_DATABASE_URL": db_url, **extra}


def _setup(folder: Path) -> tuple[dict[str, str], str]:
    """Create the database, ingest and measure mlp-small-b8; return the env and its device kind."""
    env = _env(f"sqlite:///{folder / 'bench.sqlite'}")
    spec = ROOT / "measurement_specs" / "mlp-small-b8.yaml"
    subprocess.run(_opdb("ingest", str(spec)), env=env, cwd=folder, check=True, capture_output=True)
    measured = subprocess.run(
        _opdb("measure", "mlp-small-b8", "--device", "fake"),
        env={**env, **FAST_FAKE_MEASURE},
        cwd=folder,
        check=True,
        capture_output=True,
        text=True,
    )
    found = re.search(r"^mlp-small-b8 on (.+?): ", measured.stdout, re.MULTILINE)
    if found is None:
        raise SystemExit(f"opdb measure said nothing of its device kind:\n{measured.stdout}")
    return env, found.group(1)


def _cases(folder: Path, kind: str) -> list[Case]:
    return [
        Case("python -c pass", _python("pass")),
        Case("python -c 'import torch'", _python("import torch")),
        Case("python -c 'import torch, transformers'", _python("import torch, transformers")),
        Case(f"python -c '{GPT2_ZOO}'", _python(GPT2_ZOO)),
        Case(f'python -c "{META_OP}"', _python(META_OP)),
        Case("opdb --help", _opdb("--help"), "bare"),
        Case("opdb models list", _opdb("models", "list"), "bare"),
        Case("opdb jobs", _opdb("jobs"), "bare"),
        Case(
            f"opdb estimate mlp-small-b8 --device-kind '{kind}'",
            _opdb("estimate", "mlp-small-b8", "--device-kind", kind),
            "bare",
        ),
        Case(
            "opdb harvest module:operator_db.examples:mlp -i 32x784 --name mlp -o mlp.yaml",
            _opdb(
                "harvest",
                "module:operator_db.examples:mlp",
                "-i",
                "32x784",
                "--name",
                "mlp",
                "-o",
                str(folder / "mlp.yaml"),
            ),
            "python -c 'import torch'",  # the zoo, operator_db.examples, is torch.nn itself
        ),
        Case(
            "opdb worker --device fake --until-idle",
            _opdb("worker", "--device", "fake", "--until-idle", "--poll", "0.05"),
            "python -c 'import torch'",  # a worker measures: torch is its work's own import
        ),
        Case(
            "opdb harvest transformers:GPT2Model -o gpt2/",
            _opdb("harvest", "transformers:GPT2Model", "-o", str(folder / "gpt2")),
            f"python -c '{GPT2_ZOO}'",
        ),
    ]


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(case: Case, env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Run the case once in ``cwd`` (not a checkout: ``-m`` imports from it first)."""
    if case.pythonpath is not None:
        env = {**env, "PYTHONPATH": case.pythonpath}
    cpu = _cpu_of_children()
    start = time.perf_counter()
    done = subprocess.run(case.argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{case.label} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return elapsed, _cpu_of_children() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed rounds (best, median kept)")
    parser.add_argument(
        "--before", type=Path, help="another checkout whose opdb commands are timed alongside"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="opdb-startup-") as tmp:
        folder = Path(tmp)
        env, kind = _setup(folder)
        cases = _cases(folder, kind)
        if args.before is not None:
            cases += [
                replace(c, label=f"before: {c.label}", pythonpath=str(args.before.resolve()))
                for c in cases
                if c.label.startswith("opdb ")
            ]
        load_before = os.getloadavg()[0]
        for case in cases:  # warm-up round, not timed
            _run(case, env, folder)
        for case in cases:
            case.times, case.cpu = [], []
        for _ in range(args.runs):
            for case in cases:
                wall, cpu = _run(case, env, folder)
                assert case.times is not None and case.cpu is not None
                case.times.append(wall)
                case.cpu.append(cpu)
        load_after = os.getloadavg()[0]
    wall = {c.label: statistics.median(c.times or [0.0]) for c in cases}
    cpu = {c.label: statistics.median(c.cpu or [0.0]) for c in cases}

    def limit(of: dict[str, float], case: Case) -> float:
        assert case.limit is not None
        return of["python -c pass"] + 0.5 if case.limit == "bare" else 1.5 * of[case.limit] + 0.5

    width = max(len(c.label) for c in cases)
    print(
        f"| {'command':<{width}} | best s | median s | over bare s | limit s | ratio | met "
        "| CPU s | CPU ratio | met (CPU) |"
    )
    print(f"| {'-' * width} | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |")
    for c in cases:
        m = wall[c.label]
        cells = [
            c.label.ljust(width),
            f"{min(c.times or [0.0]):.3f}",
            f"{m:.3f}",
            f"{m - wall['python -c pass']:.3f}",
        ]
        if c.limit is None:
            cells += ["-", "-", "-", f"{cpu[c.label]:.3f}", "-", "-"]
        else:
            wall_limit, cpu_limit = limit(wall, c), limit(cpu, c)
            cells += [
                f"{wall_limit:.2f}",
                f"{m / wall_limit:.2f}",
                "yes" if m <= wall_limit else "no",
                f"{cpu[c.label]:.3f}",
                f"{cpu[c.label] / cpu_limit:.2f}",
                "yes" if cpu[c.label] <= cpu_limit else "no",
            ]
        print("| " + " | ".join(cells) + " |")
    print(
        f"\n{args.runs} rounds after a warm-up; Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {load_before:.1f} before and {load_after:.1f} after. "
        "Limit: bare Python + 0.5 s for a command that does not harvest; for a harvest, 1.5 × the "
        "import of torch and its zoo + 0.5 s (the MLP: `import torch`; GPT-2: its class). The CPU "
        "columns hold the same limits against CPU seconds."
    )


if __name__ == "__main__":
    main()
