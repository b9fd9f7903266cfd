"""``opdb llm``: a causal LM's generation: harvest its steps, measure them and generate()."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table

from operator_db.cli.common import DatabaseOption, DeviceOption, console, open_store

if TYPE_CHECKING:
    from operator_db.llm.compose import GenerationEstimate
    from operator_db.stats import Interval

app = typer.Typer(
    help="Causal LMs generating token by token: TTFT, TPOT, tokens/s and J/token (docs/llm.md).",
    no_args_is_help=True,
)

BatchOption = Annotated[str, typer.Option("--batch", "-b", help="Batch sizes, e.g. 1,8.")]
PromptOption = Annotated[str, typer.Option("--prompt", "-p", help="Prompt lengths, e.g. 128,512.")]
NewTokensOption = Annotated[int, typer.Option("--new-tokens", "-n", help="Tokens generated.")]
BudgetOption = Annotated[
    float,
    typer.Option(
        help="At most this many seconds of generate() runs per (batch, prompt, new tokens), "
        "spread over its step models' rounds, those added until tight too (five runs at least)."
    ),
]
TightOption = Annotated[
    float,
    typer.Option(
        help="Most seconds each step model's job spends measuring until tight, past its blocks "
        "(OPDB_MEASURE__TIGHT_BUDGET_S for other jobs).",
    ),
]
KindOption = Annotated[
    str | None,
    typer.Option("--device-kind", help="Device kind (default: the one the LLM was run on)."),
]


def _sizes(text: str, what: str) -> list[int]:
    from operator_db.errors import InvalidInputError

    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InvalidInputError(
            f"bad {what} {text!r}: expected positive integers like 1,8"
        ) from None
    if not sizes or any(s < 1 for s in sizes):
        raise InvalidInputError(f"bad {what} {text!r}: expected positive integers like 1,8")
    return list(dict.fromkeys(sizes))


def _harvest_and_store(
    reference: str,
    overrides: list[str] | None,
    batches: list[int],
    prompts: list[int],
    new_tokens: int,
    points: int,
    dtype: str | None,
    name: str | None,
    out: str | None,
    db: str | None,
) -> str:
    """Harvest the steps, write them under ``out`` if given, store them; return the LLM's name."""
    from pathlib import Path

    from operator_db.config import get_settings
    from operator_db.harvest.inputs import parse_dtype
    from operator_db.harvest.refs import parse_overrides
    from operator_db.llm.harvest import harvest_llm
    from operator_db.llm.store import store_llm

    started = time.perf_counter()
    found = harvest_llm(
        reference,
        parse_overrides(overrides),
        batches=batches,
        prompts=prompts,
        new_tokens=new_tokens,
        points=points,
        dtype=parse_dtype(dtype),
        name=name,
    )
    if out is not None:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        for step in found.steps:
            step.result.write(folder / f"{step.result.spec.model.name}.yaml")
    with open_store(db) as store, store.transaction() as session:
        results = store_llm(session, found, max_tensor_numel=get_settings().max_tensor_numel)
        plans = [
            {"batch": b, "prompt": p, "new_tokens": new_tokens} for b in batches for p in prompts
        ]
        from operator_db.db import queries

        llm = queries.get_llm(session, found.name)
        known = list(llm.info.get("plans") or [])
        llm.info = {**llm.info, "plans": known + [p for p in plans if p not in known]}
    new = sum(r.new_configs for r in results)
    console.print(
        f"{found.name}: {len(found.steps)} step models ({found.params / 1e6:.1f} M parameters, "
        f"{found.dtype}, KV cache {found.kv_bytes_per_token} B/token), {new} new configurations, "
        f"in {time.perf_counter() - started:.1f} s"
    )
    for step in found.steps:
        spec = step.result.spec
        console.print(
            f"  {spec.model.name}: {len(spec.operators)} configurations, "
            f"{sum(o.count for o in spec.operators)} calls"
        )
    return found.name


def harvest(
    reference: Annotated[
        str, typer.Argument(help="A causal LM, e.g. transformers:LlamaForCausalLM.")
    ],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Config overrides: num_hidden_layers=2 ...")
    ] = None,
    batch: BatchOption = "1",
    prompt: PromptOption = "128",
    new_tokens: NewTokensOption = 64,
    points: Annotated[int, typer.Option(help="Decode contexts harvested per prompt.")] = 2,
    dtype: Annotated[str | None, typer.Option(help="float32, bfloat16, float16.")] = None,
    name: Annotated[
        str | None, typer.Option(help="The LLM's name (default: from the class).")
    ] = None,
    out: Annotated[str | None, typer.Option("-o", help="Also write the step specs here.")] = None,
    db: DatabaseOption = None,
) -> None:
    """Harvest REFERENCE's prefill and decode steps as generate() runs them, and store them."""
    _harvest_and_store(
        reference, overrides, _sizes(batch, "batch sizes"), _sizes(prompt, "prompt lengths"),
        new_tokens, points, dtype, name, out, db,
    )  # fmt: skip


def _plans(info: dict[str, object], batch: str | None, prompt: str | None, new_tokens: int | None):  # type: ignore[no-untyped-def]
    plans = [tuple(p.values()) for p in info.get("plans") or []]  # type: ignore[attr-defined]
    found = [
        (b, p, n)
        for b, p, n in plans
        if (batch is None or b in _sizes(batch, "batch sizes"))
        and (prompt is None or p in _sizes(prompt, "prompt lengths"))
        and (new_tokens is None or n == new_tokens)
    ]
    return list(dict.fromkeys(found))


def _measure(
    name: str,
    device: str | None,
    batch: str | None,
    prompt: str | None,
    new_tokens: int | None,
    budget: float,
    tight_budget: float,
    db: str | None,
) -> None:
    from operator_db.cli.work import _print_stats, measure_models
    from operator_db.config import get_settings
    from operator_db.db import queries
    from operator_db.devices.factory import open_device
    from operator_db.llm.store import generate_alongside, store_alongside

    with open_store(db) as store:
        with store.transaction(read_only=True) as session:
            llm = queries.get_llm(session, name)
            plans = _plans(llm.info, batch, prompt, new_tokens)
            steps = queries.llm_steps(session, llm.id)
        measure = get_settings().measure.model_copy(update={"tight_budget_s": tight_budget})
        failed = 0
        # Plan by plan: its step models' jobs, with the plan's generate() runs made inside their
        # rounds (llm.runs.GenerateAlongside), so that both see the machine in the same state.
        for b, p, n in plans:
            mine = [
                s.model_name
                for s in steps
                if s.batch == b
                and (s.tokens == p if s.phase == "prefill" else p <= s.tokens <= p + n - 1)
            ]
            started = time.perf_counter()
            with open_device(device, settings=get_settings()) as dev:
                with store.transaction(read_only=True) as session:
                    llm = queries.get_llm(session, name)
                    alongside = generate_alongside(llm, dev, (b, p, n), budget, mine, measure)
                stats = measure_models(
                    store,
                    mine,
                    device,
                    measure_settings=measure,
                    companions=alongside.companions,
                )
                _print_stats(stats)
                failed += stats.failed
                console.print(f"steps measured in {time.perf_counter() - started:.0f} s")
                with store.transaction() as session:
                    times = store_alongside(session, queries.get_llm(session, name), dev, alongside)
            console.print(
                f"generate() at batch {times.batch}, prompt {times.prompt}, "
                f"{times.new_tokens} tokens: {len(times.runs)} runs among the steps' rounds, TTFT "
                f"{_ms(times.ttft)}, total {_ms(times.total)}"
            )
    if failed:
        raise typer.Exit(1)


def measure(
    name: Annotated[str, typer.Argument(help="The LLM's name (opdb llm list).")],
    device: DeviceOption = None,
    batch: Annotated[str | None, typer.Option("--batch", "-b", help="Only these batches.")] = None,
    prompt: Annotated[
        str | None, typer.Option("--prompt", "-p", help="Only these prompts.")
    ] = None,
    new_tokens: Annotated[int | None, typer.Option("--new-tokens", "-n")] = None,
    budget: BudgetOption = 30.0,
    tight_budget: TightOption = 20.0,
    db: DatabaseOption = None,
) -> None:
    """Measure NAME's step models here, and its generate() runs (the reference) among them."""
    _measure(name, device, batch, prompt, new_tokens, budget, tight_budget, db)


def _ms(x: Interval | None, unit: bool = True) -> str:
    if x is None:
        return "–"
    found = f"{x.value * 1e3:.2f} ({x.low * 1e3:.2f}–{x.high * 1e3:.2f})"
    return found.replace(" (", " ms (", 1) if unit else found


def _pct(x: Interval | None) -> str:
    from operator_db.stats import noise_verdict

    if x is None:
        return "–"
    return f"{x.value * 100:+.1f} % {'≈' if noise_verdict(x) == 'within noise' else '≠'}"


def print_table(estimates: list[GenerationEstimate]) -> None:
    """Print estimates against their measured runs: one row per (batch, prompt, new tokens)."""
    table = Table(
        "batch", "prompt", "new", "TTFT est ms", "TTFT run ms", "err", "TPOT est ms",
        "TPOT run ms", "err", "total est ms", "total run ms", "err", "tokens/s", "J/token",
        "J/token run", "err", "TPOT bound ms",
        title=estimates[0].llm + " on " + estimates[0].device_kind if estimates else None,
    )  # fmt: skip
    for e in estimates:
        ref = e.reference
        errors = e.errors()
        joules = e.joules_per_token
        share = e.bound_share
        table.add_row(
            str(e.batch), str(e.prompt), str(e.new_tokens),
            _ms(e.ttft, False), _ms(ref.ttft if ref else None, False), _pct(errors.get("ttft")),
            _ms(e.tpot, False), _ms(ref.tpot if ref else None, False), _pct(errors.get("tpot")),
            _ms(e.total, False), _ms(ref.total if ref else None, False),
            _pct(errors.get("total")),
            f"{e.tokens_per_s:,.0f}" if e.tokens_per_s else "–",
            f"{joules.value:.3g}" if joules else "–",
            "–" if (run_joules := e.reference_joules_per_token) is None else f"{run_joules:.3g}",
            _pct(errors.get("energy")),
            f"{e.bound_tpot_s * 1e3:.3f} ({share:.0%})" if e.bound_tpot_s and share else "–",
        )  # fmt: skip
    console.print(table)
    console.print("err: estimate against the measured generate() runs; ≈ within noise, ≠ beyond")


def estimate(
    name: Annotated[str, typer.Argument(help="The LLM's name (opdb llm list).")],
    batch: Annotated[int | None, typer.Option("--batch", "-b")] = None,
    prompt: Annotated[int | None, typer.Option("--prompt", "-p")] = None,
    new_tokens: Annotated[int | None, typer.Option("--new-tokens", "-n")] = None,
    device_kind: KindOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    from_runs: Annotated[
        bool,
        typer.Option(
            "--from-runs",
            help="Take each step's own measured run, not its estimate from operators: the "
            "generation's composition alone.",
        ),
    ] = False,
    db: DatabaseOption = None,
) -> None:
    """Compose NAME's generation: at one (batch, prompt, new tokens), or at every measured one."""
    from operator_db.errors import InvalidInputError
    from operator_db.llm.estimate import estimate_generation, measured_table

    source: Literal["operators", "runs"] = "runs" if from_runs else "operators"
    given = [x is not None for x in (batch, prompt, new_tokens)]
    if any(given) and not all(given):
        raise InvalidInputError("give --batch, --prompt and --new-tokens together, or none")
    with open_store(db) as store, store.transaction(read_only=True) as session:
        if batch is not None and prompt is not None and new_tokens is not None:
            found = [
                estimate_generation(
                    session, name, device_kind, batch, prompt, new_tokens, source=source
                )
            ]
        else:
            found = measured_table(session, name, device_kind, source)
    if as_json:
        console.print(json.dumps([e.as_dict() for e in found], indent=2))
        return
    if not found:
        console.print(f"{name}: no generate() run is stored: opdb llm measure {name}")
        return
    print_table(found)
    for e in found:
        for note in e.notes:
            console.print(f"  b{e.batch} p{e.prompt} n{e.new_tokens}: {note}")
        if e.fit is not None:
            console.print(
                f"  fits {e.fit.tokens:,} cached tokens beside the weights: batch {e.batch} up to "
                f"{e.fit.max_context:,} tokens each, {e.fit.max_batch:,} sequences of "
                f"{e.prompt + e.new_tokens} tokens"
            )


def compare(
    name: Annotated[str, typer.Argument(help="The LLM's name (opdb llm list).")],
    batch: Annotated[int | None, typer.Option("--batch", "-b")] = None,
    prompt: Annotated[int | None, typer.Option("--prompt", "-p")] = None,
    new_tokens: Annotated[int | None, typer.Option("--new-tokens", "-n")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    db: DatabaseOption = None,
) -> None:
    """NAME on every device kind, measured or predicted: TTFT, TPOT, tokens/s, J/token."""
    from operator_db.db import queries
    from operator_db.llm.compare import compare_llm
    from operator_db.llm.estimate import harvested_point

    skipped: list[str] = []
    with open_store(db) as store, store.transaction(read_only=True) as session:
        b, p, n = harvested_point(queries.get_llm(session, name), batch, prompt, new_tokens)
        rows = compare_llm(
            session, name, b, p, n, on_error=lambda kind, why: skipped.append(f"{kind}: {why}")
        )
    if as_json:
        console.print(json.dumps([r.as_dict() for r in rows], indent=2))
        return
    table = Table(
        "device kind", "how", "TTFT ms", "TPOT ms", "tokens/s", "J/token", "TPOT bound ms",
        "source", title=f"{name} at batch {b}, prompt {p}, {n} new tokens",
    )  # fmt: skip
    for row in rows:
        e = row.estimate
        table.add_row(
            e.device_kind, row.how, _ms(e.ttft, False), _ms(e.tpot, False),
            f"{e.tokens_per_s:,.0f}" if e.tokens_per_s else "–",
            f"{e.joules_per_token.value:.3g}" if e.joules_per_token else "–",
            f"{e.bound_tpot_s * 1e3:.3f}" if e.bound_tpot_s else "–", row.source,
        )  # fmt: skip
    console.print(table)
    if any(r.how == "predicted" for r in rows):
        console.print(
            "predicted: the forwards alone (generate()'s time between them is not known where it "
            "never ran)"
        )
    for line in skipped:
        console.print(f"not predicted: {line}")


def run(
    reference: Annotated[
        str, typer.Argument(help="A causal LM, e.g. transformers:LlamaForCausalLM.")
    ],
    overrides: Annotated[list[str] | None, typer.Argument(help="Config overrides.")] = None,
    batch: BatchOption = "1,8",
    prompt: PromptOption = "128,512",
    new_tokens: NewTokensOption = 64,
    points: Annotated[int, typer.Option(help="Decode contexts harvested per prompt.")] = 2,
    dtype: Annotated[str | None, typer.Option(help="float32, bfloat16, float16.")] = None,
    name: Annotated[str | None, typer.Option(help="The LLM's name.")] = None,
    device: DeviceOption = None,
    budget: BudgetOption = 30.0,
    tight_budget: TightOption = 20.0,
    db: DatabaseOption = None,
) -> None:
    """From a model name to the table: harvest, measure the steps and generate(), compose."""
    started = time.perf_counter()
    llm = _harvest_and_store(
        reference, overrides, _sizes(batch, "batch sizes"), _sizes(prompt, "prompt lengths"),
        new_tokens, points, dtype, name, None, db,
    )  # fmt: skip
    _measure(llm, device, batch, prompt, new_tokens, budget, tight_budget, db)
    estimate(llm, None, None, None, None, False, False, db)
    console.print(f"in {time.perf_counter() - started:.0f} s")


def list_llms(db: DatabaseOption = None) -> None:
    """List the stored LLMs: reference, dtype, size, KV cache per token, step models."""
    from operator_db.db import queries

    table = Table("name", "reference", "dtype", "parameters", "KV B/token", "max context", "steps")
    with open_store(db) as store, store.transaction(read_only=True) as session:
        for llm in queries.list_llms(session):
            steps = len(queries.llm_steps(session, llm.id))
            table.add_row(
                llm.name, llm.reference, llm.dtype, f"{llm.params / 1e6:.1f} M",
                f"{llm.kv_bytes_per_token:,}", str(llm.max_context or "–"), str(steps),
            )  # fmt: skip
    console.print(table)


app.command()(harvest)
app.command()(measure)
app.command()(estimate)
app.command()(compare)
app.command()(run)
app.command("list")(list_llms)
