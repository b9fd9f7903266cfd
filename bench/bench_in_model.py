"""Benchmark: each leaf module's time inside the model against its time alone, per module type.

Rebuilds the spec's model on the CPU, times every leaf module inside the forward pass (forward
hooks around each call, median over passes), then times the same module object on the same input
looped alone (what operator-db measures). Prints the forward pass, the leaves' sums in the model
and alone, and the ratio per module type: how much slower operators run inside the model (caches,
code paths) — the part of the estimate's error that no operator measured alone sees. Run:

    .venv/bin/python bench/bench_in_model.py measurement_specs/mobilenetv2-b1.yaml [--passes 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from operator_db.harvest.inputs import ModelInputs
from operator_db.harvest.refs import load_model, parse_reference
from operator_db.measure.allocator import retain_freed_memory
from operator_db.specs import load_spec
from operator_db.specs.schema import TensorSpec


def _median_ns(call: Callable[[], object], repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("--passes", type=int, default=20, help="Timed forward passes.")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    retain_freed_memory()
    spec = load_spec(args.spec, max_bytes=10**9).spec
    info = spec.model
    if info.reference is None:
        raise SystemExit(f"{args.spec}: the model has no reference to rebuild it from")
    model = load_model(parse_reference(info.reference, dict(info.overrides)), device="cpu").eval()
    specs = [TensorSpec.model_validate(t.model_dump()) for t in info.inputs]
    inputs, kwargs = ModelInputs.of(specs).materialize(torch.device("cpu"), None, 0)

    def forward() -> None:
        with torch.no_grad():
            model(*inputs, **kwargs)

    plain = _median_ns(forward, args.passes)
    leaves = [(n, m) for n, m in model.named_modules() if not list(m.children())]
    inside: dict[str, list[int]] = defaultdict(list)
    first_call: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
    started: dict[str, int] = {}
    handles = []
    for name, module in leaves:

        def pre(_m: torch.nn.Module, a: Any, kw: Any, name: str = name) -> None:
            started[name] = time.perf_counter_ns()

        def post(_m: torch.nn.Module, a: Any, kw: Any, _out: Any, name: str = name) -> None:
            inside[name].append(time.perf_counter_ns() - started[name])
            first_call.setdefault(name, (a, kw))

        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True))
    passes = args.passes + 3
    _median_ns(forward, args.passes)
    for handle in handles:
        handle.remove()
    per_type: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for name, module in leaves:
        if name not in first_call:
            continue
        a, kw = first_call[name]
        calls_per_pass = len(inside[name]) // passes
        in_model = statistics.median(inside[name]) * calls_per_pass

        def alone_call(module: torch.nn.Module = module, a: Any = a, kw: Any = kw) -> None:
            with torch.no_grad():
                module(*a, **kw)

        repeats = max(5, min(200, int(2e6 / max(in_model, 1.0))))
        alone = _median_ns(alone_call, repeats) * calls_per_pass
        row = per_type[type(module).__name__]
        row[0] += in_model
        row[1] += alone
        row[2] += calls_per_pass
    total_in = sum(r[0] for r in per_type.values())
    total_alone = sum(r[1] for r in per_type.values())
    print(
        f"{info.name}: forward {plain / 1e6:.2f} ms; leaves in the model "
        f"{total_in / 1e6:.2f} ms, alone {total_alone / 1e6:.2f} ms "
        f"(×{total_in / max(total_alone, 1.0):.2f}); {torch.get_num_threads()} thread(s)"
    )
    print("| module type | calls | in the model (ms) | alone (ms) | ratio |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for kind, (t_in, t_alone, calls) in sorted(per_type.items(), key=lambda kv: -kv[1][0]):
        print(
            f"| {kind} | {calls:.0f} | {t_in / 1e6:.2f} | {t_alone / 1e6:.2f} | "
            f"{t_in / max(t_alone, 1.0):.2f} |"
        )


if __name__ == "__main__":
    main()
