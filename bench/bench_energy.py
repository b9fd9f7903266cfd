"""Benchmark: device seconds per configuration with energy, short aligned windows vs 5 s × 4.

Measures each configuration of a spec twice with energy, on one device: at the default settings
(aligned windows, ``ENERGY_PLANS["aligned"]``; ``--window-s``, ``--trials``, ``--warmup-s`` change
them) and with the timed method (5 s windows × 4 trials, 50 counter periods). Prints per
configuration the wall seconds each took (timing and energy: what a worker spends on it) and the
energy per call of each, their difference, and the totals: the seconds a model's configurations
take with energy, and the median and worst disagreement with the timed method (the targets: under
3 minutes for ResNet-50 b1's 57 configurations; 1 % median, 2 % worst). Run on a GPU host:

    python bench/bench_energy.py measurement_specs/resnet50-b1.yaml [--limit N] [--window-s 0.25]
        [--trials 3] [--json out.json]

and anywhere on the fake device, with every window scaled down by ``--dry-run`` (the figures then
say nothing of a GPU):

    .venv/bin/python bench/bench_energy.py --device fake --dry-run --limit 5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from operator_db.config import MeasureSettings, get_settings
from operator_db.devices.factory import open_device
from operator_db.measure.engine import measure
from operator_db.ops import build_op
from operator_db.specs import load_spec

ROOT = Path(__file__).resolve().parent.parent
DRY_SCALE = 0.02
"""``--dry-run``: every window and gap times this."""


def _settings(
    base: MeasureSettings,
    *,
    windows: str,
    window_s: float | None,
    trials: int | None,
    warmup_s: float | None,
    scale: float,
) -> MeasureSettings:
    plan = base.model_copy(
        update={
            "energy_windows": windows,
            "energy_window_s": window_s,
            "trials": trials,
            "energy_warmup_s": warmup_s,
        }
    ).energy_plan()
    return base.model_copy(
        update={
            "energy": True,
            "energy_windows": windows,
            "energy_window_s": plan.window_s * scale,
            "energy_window_min_periods": 50,
            "trials": plan.trials,
            "energy_warmup_s": plan.warmup_s * scale,
            "cooldown_s": 0.0,
        }
    )


def _one(run: Any, device: Any, settings: MeasureSettings) -> tuple[float, float | None]:
    start = time.perf_counter()
    with torch.no_grad():
        result = measure(run, device, settings)
    energy = result.energy_per_call
    return time.perf_counter() - start, None if energy is None else energy.median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default=str(ROOT / "measurement_specs/resnet50-b1.yaml"))
    parser.add_argument("--device", default="nvidia")
    parser.add_argument("--limit", type=int, default=None, help="The first N configurations.")
    parser.add_argument("--window-s", type=float, default=None, help="Default: the plan's.")
    parser.add_argument("--trials", type=int, default=None, help="Default: the plan's.")
    parser.add_argument("--warmup-s", type=float, default=None, help="Default: the plan's.")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    settings = get_settings()
    scale = DRY_SCALE if args.dry_run else 1.0
    short = _settings(
        settings.measure,
        windows="aligned",
        window_s=args.window_s,
        trials=args.trials,
        warmup_s=args.warmup_s,
        scale=scale,
    )
    long = _settings(
        settings.measure, windows="timed", window_s=5.0, trials=4, warmup_s=0.5, scale=scale
    )
    spec = load_spec(args.spec, max_bytes=settings.max_spec_bytes).spec
    ops = [op for op in spec.operators if op.form != "opaque"][: args.limit]
    rows: list[dict[str, Any]] = []
    with open_device(args.device, settings=settings) as device:
        for op in ops:
            run = build_op(op, device=device.torch_device(), seed=settings.measure.seed).run
            short_s, short_j = _one(run, device, short)
            long_s, long_j = _one(run, device, long)
            diff = None if not short_j or not long_j else short_j / long_j - 1
            rows.append(
                {
                    "op": op.op,
                    "short_s": short_s,
                    "long_s": long_s,
                    "short_j": short_j,
                    "long_j": long_j,
                    "difference": diff,
                }
            )
            print(
                f"{op.op:40s} short {short_s:6.2f} s  long {long_s:6.2f} s  "
                f"{'-' if diff is None else f'{diff:+.2%}'}",
                flush=True,
            )
        name = device.identity().name
    diffs = [abs(r["difference"]) for r in rows if r["difference"] is not None]
    total = sum(r["short_s"] for r in rows)
    summary = {
        "device": name,
        "spec": spec.model.name,
        "configurations": len(rows),
        "short": dataclasses.asdict(short.energy_plan()),
        "short_total_s": total,
        "short_per_config_s": total / len(rows) if rows else None,
        "long_total_s": sum(r["long_s"] for r in rows),
        "median_abs_difference": statistics.median(diffs) if diffs else None,
        "worst_abs_difference": max(diffs) if diffs else None,
        "dry_run": args.dry_run,
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps({**summary, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
