"""Importing a public data set (NeuSight, issue 33): wall time, peak memory, and a second run.

    .venv/bin/python bench/bench_import.py [--data ../shared/data/neusight] [--db URL]

Runs ``opdb import DATA`` twice as fresh processes against one database (default: a new SQLite
file in a temporary folder; ``--db`` another, e.g. ``postgresql+psycopg://postgres@127.0.0.1:5432/
test``, which should be empty of this data set) and prints each run's wall time, CPU time and
peak RSS (the process's ``ru_maxrss``) and the import's totals.

Targets: the first run under 2 minutes, the second under 20 s (it adds nothing), peak RSS under
1.5 GB.
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "neusight"
TARGETS = {"first_s": 120.0, "second_s": 20.0, "rss_gb": 1.5}
_TOTAL = re.compile(r"(\d+) results imported, (\d+) duplicates, (\d+) bad rows skipped")


def _run(data: Path, db: str) -> dict[str, float | str]:
    """Run one ``opdb import`` in a fresh process; return its wall, CPU, peak RSS and totals."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "operator_db", "import", str(data), "--db", db],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"opdb import failed ({done.returncode}): {done.stderr or done.stdout}")
    found = _TOTAL.search(" ".join(done.stdout.split()))
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "rss_gb": after.ru_maxrss * 1024 / 1e9,  # Linux: KiB; the largest child so far
        "imported": found.group(1) if found else "?",
        "duplicates": found.group(2) if found else "?",
        "skipped": found.group(3) if found else "?",
    }


def main() -> None:
    """Parse the arguments, run the import twice, print the figures against the targets."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="The data set's folder.")
    parser.add_argument("--db", default=None, help="Database URL (default: a new SQLite file).")
    args = parser.parse_args()
    if not args.data.is_dir():
        raise SystemExit(f"{args.data}: no such folder (the NeuSight data set, docs/datasets.md)")
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or f"sqlite:///{Path(tmp) / 'import.sqlite'}"
        first = _run(args.data, db)
        second = _run(args.data, db)
    print(f"opdb import {args.data} --db {db.split('@')[-1]}")
    print(
        f"{'run':<8}{'wall (s)':>10}{'CPU (s)':>10}{'peak RSS (GB)':>15}  "
        "imported / duplicates / bad"
    )
    for name, run in (("first", first), ("second", second)):
        print(
            f"{name:<8}{run['wall_s']:>10.1f}{run['cpu_s']:>10.1f}{run['rss_gb']:>15.2f}  "
            f"{run['imported']} / {run['duplicates']} / {run['skipped']}"
        )
    checks = [
        ("first run", float(first["wall_s"]), TARGETS["first_s"], "s"),
        ("second run", float(second["wall_s"]), TARGETS["second_s"], "s"),
        ("peak RSS", max(float(first["rss_gb"]), float(second["rss_gb"])), TARGETS["rss_gb"], "GB"),
    ]
    for label, value, limit, unit in checks:
        verdict = "met" if value < limit else "NOT met"
        print(f"target {label} < {limit:g} {unit}: {value:.2f} {unit}, {verdict}")


if __name__ == "__main__":
    main()
