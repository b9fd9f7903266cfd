"""Harvest time and peak memory: ResNet-50, and a transformers model of over 1e9 parameters.

Each case runs in a fresh process so that its peak resident memory is its own:

    .venv/bin/python bench/bench_harvest.py [--runs 3]

Figures: building the model on the meta device; the first harvest (cold: code paths warm up) and
the best of ``--runs`` harvests; tracemalloc's peak of Python allocations during one more harvest
(not timed: tracing slows Python down); the process's peak RSS above what it held after importing
torch and transformers; and what the weights would take in float32, for comparison.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import tracemalloc

CASES: dict[str, tuple[str, dict[str, object]]] = {
    "resnet50": ("transformers:ResNetModel", {}),
    # Llama-3.2-1B's shape: 16 layers, width 2048, 32 heads (8 KV heads), 128256-token vocabulary.
    "llama-1.2b": (
        "transformers:LlamaModel",
        {
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 16,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 128256,
        },
    ),
}


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def _child(case: str, runs: int) -> dict[str, object]:
    import torch
    import transformers  # noqa: F401 - imported before the baseline, as a user's session has it

    from operator_db.harvest import harvest, load_reference, parse_reference

    reference, overrides = CASES[case]
    baseline = _rss_mib()
    ref = parse_reference(reference, overrides)  # type: ignore[arg-type]
    start = time.perf_counter()
    model = load_reference(ref)
    build_s = time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())
    times = []
    for _ in range(max(1, runs)):
        start = time.perf_counter()
        result = harvest(model, reference=ref)
        times.append(time.perf_counter() - start)
    # Traced apart: tracemalloc slows Python down several times, so it is not timed.
    tracemalloc.start()
    harvest(model, reference=ref)
    _, python_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {
        "case": case,
        "params": params,
        "weights_fp32_mib": params * 4 / 2**20,
        "build_s": build_s,
        "harvest_first_s": times[0],
        "harvest_best_s": min(times),
        "python_peak_mib": python_peak / 2**20,
        "rss_peak_above_imports_mib": peak_rss - baseline,
        "configurations": result.configurations,
        "calls": result.calls,
        "gflops": result.flops / 1e9,
        "opaque_calls": sum(o.count for o in result.opaque),
        "device": result.device,
        "torch": torch.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="harvests per case (best is kept)")
    parser.add_argument("--case", choices=sorted(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(_child(args.case, args.runs)))
        return
    rows = []
    for case in CASES:
        out = subprocess.run(
            [sys.executable, __file__, "--case", case, "--runs", str(args.runs)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    header = (
        f"{'model':<11} {'params':>8} {'weights':>9} {'build':>7} {'harvest':>8} "
        f"{'best':>7} {'py peak':>8} {'RSS peak':>9} {'configs':>7} {'calls':>6} "
        f"{'GFLOPs':>8} {'opaque':>6}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['case']:<11} {r['params'] / 1e9:>7.3f}B {r['weights_fp32_mib'] / 1024:>7.2f}GiB "
            f"{r['build_s']:>6.2f}s {r['harvest_first_s']:>7.2f}s {r['harvest_best_s']:>6.2f}s "
            f"{r['python_peak_mib']:>6.1f}MiB {r['rss_peak_above_imports_mib']:>7.0f}MiB "
            f"{r['configurations']:>7} {r['calls']:>6} {r['gflops']:>8.1f} "
            f"{r['opaque_calls']:>6}"
        )
    print(
        f"(device: {rows[0]['device']}, torch {rows[0]['torch']}; weights: float32 size the "
        "model would need if built for real; RSS peak: above the process after imports)"
    )


if __name__ == "__main__":
    main()
