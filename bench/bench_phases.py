"""Benchmark: the replay against the model by the host's speed, in one process (issue 47).

A VM's speed at several threads moves in stretches of seconds (a ResNet-50 b1 call 55 to 92 ms
within one process on a 2-vCPU Zen 4 VM). This times, round after round for ``--seconds``, a few
calls of the model, a few passes of its replay (``measure/replay.py``, as a model job builds
it) and the model's hollow run, then sorts the rounds by the model's time and prints, per
quarter of them (fastest first): the model, the replay's pass, the hollow run, their ratio
((replay + hollow) / model, near what the estimate's error follows), the operator types' sums in
the replay, and, with ``--hooked``, the same leaf module types timed inside the model (forward
hooks, in extra calls of the same round). After the rounds the model is timed at one thread:
on the Zen 4 VM its speed held still while that of two threads moved. Run:

    .venv/bin/python bench/bench_phases.py [SPEC] [--seconds 120] [--hooked] [--positions ReLU]

``--positions TYPE`` instead times every call of one leaf module type position by position, in
the replay and inside the model (hooks, call order), and prints each position in the fastest
quarter of the rounds and in the slower half.

(default: ``measurement_specs/resnet50-b1.yaml``; torch's default threads).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from bench_replay import build_spec

from operator_db.config import get_settings
from operator_db.devices.factory import open_device
from operator_db.measure.allocator import retain_freed_memory
from operator_db.measure.model_run import ModelRun
from operator_db.measure.replay import Replay
from operator_db.ops.build import BuiltOp
from operator_db.specs import load_spec

ROOT = Path(__file__).resolve().parent.parent
CALLS = 3
"""Calls of each target a round, median taken."""


def _ms(call: Callable[[], object]) -> float:
    start = time.perf_counter_ns()
    call()
    return (time.perf_counter_ns() - start) / 1e6


def _leaf_module(run: Callable[[], object]) -> torch.nn.Module | None:
    """Return the model that ``run`` (a closure of ``prepare_model_run``) calls, or None."""
    for cell in run.__closure__ or ():
        value = cell.cell_contents
        if isinstance(value, torch.nn.Module):
            return value
        if callable(value) and getattr(value, "__closure__", None):
            found = _leaf_module(value)
            if found is not None:
                return found
    return None


class _Marks:
    """A clock (ns) that keeps every reading.

    A replay built on it reads it before and after each call, so a pass's readings give every
    position's time.
    """

    def __init__(self) -> None:
        self.readings: list[int] = []

    def __call__(self) -> int:
        now = time.perf_counter_ns()
        self.readings.append(now)
        return now

    def pass_us(self, replay: Replay) -> list[float]:
        """Run one pass of ``replay`` (built on this clock): µs per position."""
        self.readings.clear()
        replay()
        marks = self.readings
        return [(b - a) / 1e3 for a, b in zip(marks[::2], marks[1::2], strict=True)]


def positions(
    model: ModelRun, calls: list[tuple[str, BuiltOp]], names: list[str], kind: str, seconds: float
) -> None:
    """Print each call of module type ``kind`` in the replay and inside the model, µs."""
    marks = _Marks()
    replay = Replay(calls, clock=marks)
    wanted = [j for j, name in enumerate(names) if name == kind]
    net = _leaf_module(model.run)
    modules = [] if net is None else [m for m in net.modules() if type(m).__name__ == kind]
    starts: dict[int, int] = {}
    seen: list[float] = []

    def pre(module: torch.nn.Module, _inputs: Any) -> None:
        starts[id(module)] = time.perf_counter_ns()

    def post(module: torch.nn.Module, _inputs: Any, _output: Any) -> None:
        seen.append((time.perf_counter_ns() - starts[id(module)]) / 1e3)

    rounds: list[tuple[float, list[float], list[float]]] = []
    with torch.no_grad():
        for _ in range(3):
            model.run()
            replay.untimed()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            model_ms = statistics.median(_ms(model.run) for _ in range(CALLS))
            passes = [marks.pass_us(replay) for _ in range(CALLS)]
            handles = [
                h
                for m in modules
                for h in (m.register_forward_pre_hook(pre), m.register_forward_hook(post))
            ]
            inside = []
            for _ in range(CALLS):
                seen.clear()
                model.run()
                inside.append(list(seen))
            for handle in handles:
                handle.remove()
            rounds.append(
                (
                    model_ms,
                    [statistics.median(p[j] for p in passes) for j in wanted],
                    [statistics.median(c) for c in zip(*inside, strict=True)],
                )
            )
    rounds.sort(key=lambda r: r[0])
    fast, slow = rounds[: len(rounds) // 4], rounds[len(rounds) // 2 :]
    print(
        f"{len(rounds)} rounds; the model {statistics.mean(r[0] for r in fast):.1f} ms in the "
        f"fastest quarter, {statistics.mean(r[0] for r in slow):.1f} in the slower half"
    )
    for j, step in enumerate(wanted):
        if j >= len(rounds[0][2]):
            break
        first = calls[step][1].args[0]
        shape = "x".join(map(str, first.shape)) if isinstance(first, torch.Tensor) else "?"
        cells = [statistics.mean(r[k][j] for r in part) for part in (fast, slow) for k in (1, 2)]
        print(
            f"{j:3d} {shape:16s} after {names[step - 1] if step else '-':18s} fastest: replay "
            f"{cells[0]:7.1f} model {cells[1]:7.1f} | slower half: replay {cells[2]:7.1f} "
            f"model {cells[3]:7.1f} µs"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default=str(ROOT / "measurement_specs/resnet50-b1.yaml"))
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--hooked", action="store_true")
    parser.add_argument("--positions", metavar="TYPE", default=None)
    args = parser.parse_args()
    settings = get_settings()
    retain_freed_memory()
    device = open_device("cpu", settings=settings)
    spec = load_spec(args.spec, max_bytes=settings.max_spec_bytes).spec
    info = spec.model
    keys, built, model = build_spec(spec, device, seed=0)
    calls = [(keys[i], built[keys[i]]) for i in spec.calls or [] if keys[i] in built]
    op_of = {k: op.op.rsplit(".", 1)[-1] for op, k in zip(spec.operators, keys, strict=True)}
    if args.positions:
        names = [op_of[key] for key, _ in calls]
        positions(model, calls, names, args.positions, args.seconds)
        device.close()
        return
    replay = Replay(calls)
    hollow = model.hollow or (lambda: None)
    inside: defaultdict[str, int] = defaultdict(int)
    starts: dict[int, int] = {}
    leaves = []
    net = _leaf_module(model.run) if args.hooked else None
    if net is not None:
        leaves = [m for m in net.modules() if not list(m.children())]

    def pre(module: torch.nn.Module, _inputs: Any) -> None:
        starts[id(module)] = time.perf_counter_ns()

    def post(module: torch.nn.Module, _inputs: Any, _output: Any) -> None:
        inside[type(module).__name__] += time.perf_counter_ns() - starts[id(module)]

    threads = torch.get_num_threads()
    rounds: list[tuple[float, float, float, dict[str, float], dict[str, float]]] = []
    with torch.no_grad():
        for _ in range(3):
            model.run()
            replay.untimed()
            hollow()
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            model_ms = statistics.median(_ms(model.run) for _ in range(CALLS))
            first = len(replay._passes)
            for _ in range(CALLS):
                replay()
            passes = replay._passes[first:]
            hollow_ms = statistics.median(_ms(hollow) for _ in range(CALLS))
            types: defaultdict[str, float] = defaultdict(float)
            for i, key in enumerate(replay._keys):
                types[op_of[key]] += statistics.median(p[i] for p in passes) / 1e6
            hooked: dict[str, float] = {}
            if leaves:
                handles = [
                    h
                    for m in leaves
                    for h in (m.register_forward_pre_hook(pre), m.register_forward_hook(post))
                ]
                inside.clear()
                for _ in range(CALLS):
                    model.run()
                for handle in handles:
                    handle.remove()
                hooked = {k: v / CALLS / 1e6 for k, v in inside.items()}
            replay_ms = statistics.median(sum(p) / 1e6 for p in passes)
            rounds.append((model_ms, replay_ms, hollow_ms, dict(types), hooked))
        torch.set_num_threads(1)
        one = statistics.median(_ms(model.run) for _ in range(CALLS))
        torch.set_num_threads(threads)
    device.close()
    rounds.sort(key=lambda r: r[0])
    print(
        f"{info.name}: {len(rounds)} rounds of {CALLS} calls each, {threads} threads; the model "
        f"at 1 thread after them {one:.1f} ms"
    )
    n = len(rounds)
    for q in range(4):
        part = rounds[q * n // 4 : (q + 1) * n // 4]
        if not part:
            continue
        model_ms, replay_ms, hollow_ms = (statistics.mean(r[j] for r in part) for j in range(3))
        types = {t: statistics.mean(r[3][t] for r in part) for t in part[0][3]}
        line = " ".join(f"{t} {v:.2f}" for t, v in sorted(types.items(), key=lambda x: -x[1]))
        print(
            f"quarter {q + 1}: model {model_ms:.1f} ms, replay {replay_ms:.1f}, hollow "
            f"{hollow_ms:.2f}, (replay + hollow) / model {(replay_ms + hollow_ms) / model_ms:.3f}"
            f" | replay by type (ms): {line}"
        )
        if part[0][4]:
            hooked = {t: statistics.mean(r[4].get(t, 0.0) for r in part) for t in part[0][4]}
            line = " ".join(f"{t} {v:.2f}" for t, v in sorted(hooked.items(), key=lambda x: -x[1]))
            print(f"           inside the model, hooked (ms): {line}")


if __name__ == "__main__":
    main()
