"""Benchmark: how each part of the replay brings a CPU model's operators to the model's time.

For each spec (with its call order, spec version 3), builds every measurable configuration once,
the model and its hollow run, and times them all in one interleaved measurement
(``measure_interleaved``, as a model job does) together with four replays of the model's calls
(``measure/replay.py``): one instance per configuration or one per call position, each call
reading its own inputs or the previous call's output (chained). Each way of timing the operators
is composed as the estimate does — Σ count × per-call time, plus the hollow run minus the
functional operators' share as composed — and printed against the measured model. The last row
composes the replay with the hollow run less the functional operators' *looped-alone* times
instead (the time between operators if they ran in the hollow pass as they do alone: see
docs/llm.md, "What the figures say"). Run:

    .venv/bin/python bench/bench_replay.py [SPEC ...] [--threads N]

(default: ResNet-50, MobileNetV2 and BERT-base at batch 1; ``--threads`` defaults to torch's,
every core the process may use). Settings come from ``OPDB_MEASURE__*`` as usual.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

from operator_db.config import get_settings
from operator_db.devices import Device
from operator_db.devices.factory import open_device
from operator_db.measure.allocator import retain_freed_memory
from operator_db.measure.engine import Target, measure_interleaved, operator_min_time_s
from operator_db.measure.model_run import ModelRun, prepare_model_run
from operator_db.measure.replay import Replay
from operator_db.ops import build_op
from operator_db.ops.build import BuiltOp
from operator_db.specs import Spec, load_spec, operator_key

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["resnet50-b1", "mobilenetv2-b1", "bert-base-b1"]
VARIANTS = {
    "in order, one instance per configuration, own inputs": (0, False),
    "in order, one instance per call position, own inputs": (2 * 1024**3, False),
    "in order, one instance per configuration, chained": (0, True),
    "in order, one instance per call position, chained (the replay)": (2 * 1024**3, True),
}
"""Label → (``max_copy_bytes``, ``chain``) of a :class:`Replay`."""
ALONE = "the replay, the hollow run less the functional operators' looped-alone times"


def _compose(
    spec: Spec,
    keys: list[str],
    per_call: dict[str, float],
    hollow_s: float | None,
    functional_from: dict[str, float],
) -> float:
    """Σ count × per-call time + max(hollow − Σ the functional operators, 0), in s.

    The functional operators' time subtracted from the hollow run is taken from
    ``functional_from`` (the estimate: the per-call times it composes, ``per_call``).
    """
    ops = [(op, key) for op, key in zip(spec.operators, keys, strict=True) if key in per_call]
    total = sum(op.count * per_call[key] for op, key in ops)
    functional = sum(op.count * functional_from[key] for op, key in ops if op.form == "function")
    return total + (max(hollow_s - functional, 0.0) if hollow_s is not None else 0.0)


def build_spec(
    spec: Spec, device: Device, seed: int
) -> tuple[list[str], dict[str, BuiltOp], ModelRun]:
    """Return a spec's configuration keys, its measurable configurations built, and its model.

    The keys follow the spec's operators; the model has the hollow run that stubs the modules
    the spec records.
    """
    info = spec.model
    keys = [operator_key(op, info.mode) for op in spec.operators]
    built = {
        key: build_op(op, seed=seed)
        for op, key in zip(spec.operators, keys, strict=True)
        if op.form != "opaque"
    }
    model = prepare_model_run(
        info.reference,
        info.overrides,
        info.mode,
        info.dtype,
        [t.model_dump() for t in info.inputs],
        device=device.torch_device(),
        seed=seed,
        stub={loc for op in spec.operators if op.form == "module" for loc in op.locations},
    )
    return keys, built, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "specs", nargs="*", default=[str(ROOT / f"measurement_specs/{n}.yaml") for n in DEFAULT]
    )
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    settings = get_settings()
    measure = settings.measure.model_copy(update={"threads": args.threads, "energy": False})
    retain_freed_memory()
    device = open_device("cpu", settings=settings)
    print(
        f"device kind: {device.identity().name}; torch {torch.__version__}; threads "
        f"{args.threads or torch.get_num_threads()}; load average before "
        f"{', '.join(f'{v:.2f}' for v in os.getloadavg())}"
    )
    rows: dict[str, list[str]] = {
        "looped alone": [],
        **{label: [] for label in VARIANTS},
        ALONE: [],
    }
    names = []
    for path in args.specs:
        spec = load_spec(path, max_bytes=settings.max_spec_bytes).spec
        if spec.calls is None:
            raise SystemExit(f"{path}: the spec has no call order (harvest it again)")
        info = spec.model
        names.append(info.name)
        keys, built, model = build_spec(spec, device, measure.seed)
        calls = [(keys[i], built[keys[i]]) for i in spec.calls if keys[i] in built]
        replays = {
            label: Replay(calls, max_copy_bytes=copies, chain=chain)
            for label, (copies, chain) in VARIANTS.items()
        }
        min_time = operator_min_time_s(device, measure)
        targets = [Target(k, b.run, min_time_s=min_time, energy=False) for k, b in built.items()]
        targets.append(Target("model", model.run, min_time_s=measure.model_min_time_s))
        if model.hollow is not None:
            targets.append(Target("hollow", model.hollow, energy=False))
        targets += [Target(label, replay, energy=False) for label, replay in replays.items()]
        with torch.no_grad():
            results = {r.target: r for r in measure_interleaved(targets, device, measure)}
        model_s = results["model"].eager.summary.median
        hollow_s = results["hollow"].eager.summary.median if "hollow" in results else None
        alone = {k: results[k].eager.summary.median for k in built}
        rows["looped alone"].append(
            f"{_compose(spec, keys, alone, hollow_s, alone) / model_s - 1:+.1%}"
        )
        for label, replay in replays.items():
            figures = replay.figures()
            estimate = _compose(spec, keys, figures.per_call_s, hollow_s, figures.per_call_s)
            rows[label].append(f"{estimate / model_s - 1:+.1%}")
        other = _compose(spec, keys, figures.per_call_s, hollow_s, alone)
        rows[ALONE].append(f"{other / model_s - 1:+.1%}")
        print(
            f"- {info.name}: model {model_s * 1e3:.2f} ms; {len(calls)} calls replayed, "
            f"{replays[list(VARIANTS)[-1]].figures().chained:.0%} chained",
            flush=True,
        )
    device.close()
    print(f"load average after {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print()
    print("| operators timed | " + " | ".join(names) + " |")
    print("| --- |" + " ---: |" * len(names))
    for label, cells in rows.items():
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
