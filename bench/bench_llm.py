"""Benchmark: five causal LM families generating on this host, composed against generate().

For each family (random weights from a config, nothing downloaded; 2 layers, hidden 512, vocab
32,000, GPT-2's own 50,257), runs the guide's one command, ``opdb llm run`` (harvest the prefill and
decode steps at batch 1 and 8, prompt 128 and 512, 64 new tokens; measure every step model; time
whole ``generate()`` runs, each forward timed inside them) into one SQLite file, and prints its wall
time (the budget: ≤ 10 min a model). Then, per model and (batch, prompt), TTFT, TPOT and the total
composed from the operators against the measured ``generate()`` runs, each with its interval and its
error ("≈" within noise, "≠" beyond), the same composed from each step model's own measured run
(``--from- runs``: the generation's composition alone), the median and worst |error| over all rows,
the latency of an estimate at a point never run, and a tokens/s-against-batch table for the first
model (batch 1, 2, 4, 8, 16 at prompt 128) with the decode roofline beside it. Run:

    .venv/bin/python bench/bench_llm.py [--families llama,qwen2,...] [--db PATH] [--fresh]

A model already measured in ``--db`` is not run again unless ``--fresh`` (so the tables can be
printed again at once). Threads: torch's default (every core the process may use).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from operator_db.db import queries
from operator_db.db.store import Store
from operator_db.llm.compose import GenerationEstimate
from operator_db.llm.estimate import estimate_generation, llm_on_kind, measured_table
from operator_db.stats import Interval, noise_verdict

ROOT = Path(__file__).resolve().parent.parent
SHAPE = {"num_hidden_layers": 2, "vocab_size": 32000}
FAMILIES: dict[str, tuple[str, dict[str, object]]] = {
    "llama-gqa": (
        "transformers:LlamaForCausalLM",
        {"hidden_size": 512, "intermediate_size": 1408, "num_attention_heads": 8,
         "num_key_value_heads": 2},
    ),
    "qwen2": (
        "transformers:Qwen2ForCausalLM",
        {"hidden_size": 512, "intermediate_size": 1408, "num_attention_heads": 8,
         "num_key_value_heads": 2},
    ),
    "mistral": (
        "transformers:MistralForCausalLM",
        {"hidden_size": 512, "intermediate_size": 1408, "num_attention_heads": 8,
         "num_key_value_heads": 2},
    ),
    "gpt2": ("transformers:GPT2LMHeadModel", {"n_embd": 512, "n_head": 8, "n_layer": 2}),
    "phi": (
        "transformers:PhiForCausalLM",
        {"hidden_size": 512, "intermediate_size": 2048, "num_attention_heads": 8},
    ),
}  # fmt: skip
"""Name → (reference, config overrides beside :data:`SHAPE`); GPT-2 names its layers n_layer and
keeps its vocabulary of 50,257 (its end-of-text token is id 50,256)."""
THROUGHPUT_BATCHES = "1,2,4,8,16"


def _overrides(family: str) -> list[str]:
    reference, own = FAMILIES[family]
    shape = dict(SHAPE)
    if "n_layer" in own:  # GPT-2: its own names, and its own vocabulary (its tokens' ids)
        shape = {}
    return [f"{k}={v}" for k, v in {**shape, **own}.items()]


def _opdb(*args: str) -> float:
    """Run ``opdb`` with ``args``, its output shown; return its wall time in s."""
    started = time.perf_counter()
    subprocess.run([str(ROOT / ".venv" / "bin" / "opdb"), *args], check=True)
    return time.perf_counter() - started


def _measured(url: str, name: str) -> bool:
    with Store.open(url) as store, store.transaction(read_only=True) as session:
        try:
            return bool(llm_on_kind(session, name, None).runs)
        except Exception:  # noqa: BLE001 - not stored yet, or no kind yet
            return False


def _ms(x: Interval | None) -> str:
    return "–" if x is None else f"{x.value * 1e3:8.2f} ({x.low * 1e3:.2f}–{x.high * 1e3:.2f})"


def _err(x: Interval | None) -> str:
    if x is None:
        return "–"
    return f"{x.value * 100:+6.1f} % {'≈' if noise_verdict(x) == 'within noise' else '≠'}"


def _rows(estimates: list[GenerationEstimate], label: str) -> None:
    print(f"\n{label}")
    print(
        f"{'model':10} {'b':>2} {'p':>4} | {'TTFT est ms':>22} {'run':>22} {'err':>9} | "
        f"{'TPOT est ms':>20} {'run':>20} {'err':>9} | {'total err':>9}"
    )
    for e in sorted(estimates, key=lambda e: (e.llm, e.batch, e.prompt)):
        ref, errors = e.reference, e.errors()
        print(
            f"{e.llm:10} {e.batch:2} {e.prompt:4} | {_ms(e.ttft):>22} "
            f"{_ms(ref.ttft if ref else None):>22} {_err(errors.get('ttft')):>9} | "
            f"{_ms(e.tpot):>20} {_ms(ref.tpot if ref else None):>20} "
            f"{_err(errors.get('tpot')):>9} | {_err(errors.get('total')):>9}"
        )


def _summary(estimates: list[GenerationEstimate], label: str) -> None:
    print(f"\n{label}: |error| over {len(estimates)} (batch, prompt) rows")
    for figure in ("ttft", "tpot", "total"):
        errors = [e.errors()[figure] for e in estimates if figure in e.errors()]
        if not errors:
            continue
        sizes = [abs(x.value) * 100 for x in errors]
        within = sum(noise_verdict(x) == "within noise" for x in errors)
        print(
            f"  {figure:5}: median {statistics.median(sizes):.1f} %, worst {max(sizes):.1f} %, "
            f"signed median {statistics.median(x.value * 100 for x in errors):+.1f} %, "
            f"{within} of {len(errors)} within noise"
        )


def _latency(url: str, name: str) -> None:
    """Print the latency of an estimate at a (batch, prompt, new tokens) never run."""
    with Store.open(url) as store, store.transaction(read_only=True) as session:
        times = []
        for _ in range(20):
            started = time.perf_counter()
            estimate_generation(session, name, None, 8, 300, 100)
            times.append(time.perf_counter() - started)
    print(
        f"\nan estimate of {name} at batch 8, prompt 300, 100 new tokens (never run): median "
        f"{statistics.median(times) * 1e3:.1f} ms, worst {max(times) * 1e3:.1f} ms of 20"
    )


def _throughput(url: str, name: str) -> None:
    with Store.open(url) as store, store.transaction(read_only=True) as session:
        rows = measured_table(session, name, None)
        kind = llm_on_kind(session, name, None).kind.name
    print(f"\n{name} on {kind}: tokens/s against batch (prompt 128, 64 new tokens)")
    print(
        f"{'batch':>5} {'tokens/s est':>13} {'run':>8} {'TPOT est ms':>12} "
        f"{'TPOT bound ms':>14} {'share of bound':>15}"
    )
    for e in sorted(rows, key=lambda e: e.batch):
        ref = e.reference
        measured = e.batch * e.new_tokens / ref.total.value if ref else None
        print(
            f"{e.batch:5} {e.tokens_per_s or 0:13,.0f} {measured or 0:8,.0f} "
            f"{(e.tpot.value if e.tpot else 0) * 1e3:12.2f} "
            f"{(e.bound_tpot_s or 0) * 1e3:14.3f} {(e.bound_share or 0):15.1%}"
        )
    print("(bound: (weights + batch × context × KV bytes per token) / the kind's bandwidth)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--db", default=str(Path(os.environ.get("TMPDIR", "/tmp")) / "llm.db"))
    parser.add_argument("--fresh", action="store_true", help="Run every model again.")
    parser.add_argument("--no-throughput", action="store_true")
    args = parser.parse_args()
    url = f"sqlite:///{Path(args.db).resolve()}"
    families = [f for f in args.families.split(",") if f]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        sys.exit(f"unknown families {unknown}: choose from {sorted(FAMILIES)}")
    walls: dict[str, float] = {}
    if not all(_measured(url, f) for f in families) or args.fresh:
        # The decode roofline reads the kind's bandwidth: this host's measured one.
        _opdb("peaks", "--device", "cpu", "--dtypes", "float32", "--db", url)
    for family in families:
        if args.fresh or not _measured(url, family):
            walls[family] = _opdb(
                "llm", "run", FAMILIES[family][0], *_overrides(family), "--name", family,
                "--device", "cpu", "--db", url,
            )  # fmt: skip
    throughput = f"{families[0]}-batches"
    if not args.no_throughput and (args.fresh or not _measured(url, throughput)):
        walls[throughput] = _opdb(
            "llm", "run", FAMILIES[families[0]][0], *_overrides(families[0]), "--name",
            throughput, "-b", THROUGHPUT_BATCHES, "-p", "128", "--device", "cpu", "--db", url,
        )  # fmt: skip
    print(f"\n{os.cpu_count()} cores on this host")
    for name, wall in walls.items():
        print(f"{name}: harvested, measured and composed in {wall / 60:.1f} min (opdb llm run)")
    with Store.open(url) as store, store.transaction(read_only=True) as session:
        stored = {llm.name for llm in queries.list_llms(session)}
        own = [measured_table(session, f, None) for f in families if f in stored]
        runs = [measured_table(session, f, None, "runs") for f in families if f in stored]
    operators = [e for table in own for e in table]
    from_runs = [e for table in runs for e in table]
    _rows(operators, "composed from the operators (opdb llm estimate)")
    _summary(operators, "composed from the operators")
    _rows(from_runs, "composed from each step model's own run (opdb llm estimate --from-runs)")
    _summary(from_runs, "composed from the step models' runs")
    _latency(url, families[0])
    if not args.no_throughput and throughput in stored | {throughput}:
        _throughput(url, throughput)


if __name__ == "__main__":
    main()
