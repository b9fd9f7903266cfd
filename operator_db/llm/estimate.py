"""A stored LLM's generation on a kind: step models' estimates and generate() runs, composed.

Reads through ``db.queries`` and ``estimate.compose.estimate_model`` (each step model is composed
from its operators as any model) and hands plain figures to :mod:`operator_db.llm.compose`. No
torch: ``opdb llm estimate`` and the API run without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.llm_tables import GenerationRun, Llm
from operator_db.db.models import DeviceKind
from operator_db.errors import InvalidInputError, NotFoundError
from operator_db.estimate.compose import estimate_model
from operator_db.llm.compose import (
    Between,
    GenerationEstimate,
    Reference,
    StepFigure,
    compose_generation,
)
from operator_db.llm.timings import GenerateRun, GenerationTimes
from operator_db.roofline.peaks import best_peaks, kind_peaks
from operator_db.stats import Interval, exact

StepSource = Literal["operators", "runs"]
"""What a step's figure is: composed from its operators (an estimate), or its own measured run."""


def step_figures(
    session: Session,
    llm: Llm,
    kind: DeviceKind,
    batch: int | None = None,
    source: StepSource = "operators",
) -> list[StepFigure]:
    """Return the figure of each step model of ``llm`` measured on ``kind`` (at ``batch``).

    ``source="operators"``: the step's estimate, composed from its operators as any model's;
    ``"runs"``: the step model's own measured run (to tell the composition's error from the
    generation's).
    """
    found: list[StepFigure] = []
    for step in queries.llm_steps(session, llm.id):
        if batch is not None and step.batch != batch:
            continue
        estimate = estimate_model(session, step.model_name, kind.name)
        if source == "runs":
            time, energy = estimate.full_run_interval, estimate.full_run_energy_interval
        else:
            time, energy = estimate.time_interval, estimate.energy_interval
        if time is None or time.value <= 0:
            continue
        idle_w = estimate.idle_power_w
        found.append(
            StepFigure(step.phase, step.batch, step.tokens, time, energy, step.model_name, idle_w)
        )
    return found


def _interval(value: float, low: float, high: float, level: float) -> Interval:
    return Interval(value, low, high, level, "median of runs")


def reference_of(run: GenerationRun, phases: Mapping[str, str] | None = None) -> Reference:
    """Return a stored set of ``generate()`` runs as the reference figures.

    ``phases`` maps step models to their phase ("prefill", "decode"). Each figure is compared
    with the runs made in the jobs of the steps it is composed of, where at least
    :data:`MIN_RUNS` runs were made there: the TTFT with those in the prefill's job, the TPOT and
    each decode step with those in the decode steps' jobs; the total and the energy with all.
    A prefill runs at the speed of the work around it: GPT-2's at batch 8, prompt 512, took
    381–464 ms inside ``generate()`` during its own job (411 ms in a fresh process), 259–306 ms
    during the decode steps' jobs that followed (docs/llm.md).
    """
    runs = [GenerateRun(**r) for r in (run.raw or {}).get("runs") or []]
    times = GenerationTimes(run.batch, run.prompt, run.new_tokens, runs)
    jobs = phases or {}
    prefill = times.made_in({m for m, p in jobs.items() if p == "prefill"})
    decode = times.made_in({m for m, p in jobs.items() if p == "decode"}) or times
    energy = None
    if run.energy_j is not None and run.energy_low_j is not None and run.energy_high_j is not None:
        energy = _interval(run.energy_j, run.energy_low_j, run.energy_high_j, run.ci_level)
    tpot = None
    if decode is not times:
        tpot = decode.tpot
    elif run.tpot_s is not None and run.tpot_low_s is not None and run.tpot_high_s is not None:
        tpot = _interval(run.tpot_s, run.tpot_low_s, run.tpot_high_s, run.ci_level)
    return Reference(
        ttft=prefill.ttft
        if prefill is not None
        else _interval(run.ttft_s, run.ttft_low_s, run.ttft_high_s, run.ci_level),
        tpot=tpot,
        total=_interval(run.total_s, run.total_low_s, run.total_high_s, run.ci_level),
        energy=energy,
        runs=run.runs,
        steps_s=decode.steps_s,
        ttft_runs=len(prefill.runs) if prefill is not None else run.runs,
        tpot_runs=len(decode.runs) if decode is not times else run.runs,
    )


def between_of(run: GenerationRun) -> Between | None:
    """Return ``generate()``'s time around the forwards in a set of runs; None if not timed."""
    runs = [GenerateRun(**r) for r in (run.raw or {}).get("runs") or []]
    times = GenerationTimes(run.batch, run.prompt, run.new_tokens, runs)
    ttft, step = times.between_ttft, times.between_step
    if not runs or ttft is None:
        return None
    return Between(
        ttft=ttft,
        step=step if step is not None else exact(0.0),
        tail=times.tail,
        at=(run.batch, run.prompt, run.new_tokens),
    )


def _nearest_between(
    runs: Sequence[GenerationRun], batch: int, prompt: int, new_tokens: int
) -> Between | None:
    """Return the time between forwards at this point, else the nearest batch, then prompt."""
    ranked = sorted(
        runs,
        key=lambda r: (
            (r.batch, r.prompt, r.new_tokens) != (batch, prompt, new_tokens),
            abs(r.batch - batch),
            abs(r.prompt - prompt),
        ),
    )
    for run in ranked:
        found = between_of(run)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class LlmKind:
    """An LLM and a kind, with what every estimate of the pair reads once."""

    llm: Llm
    kind: DeviceKind
    runs: list[GenerationRun]
    bandwidth_bytes_per_s: float | None


def llm_on_kind(session: Session, llm_name: str, kind_name: str | None) -> LlmKind:
    """Return the LLM and the kind (the only one with its runs or measurements when None).

    Raises:
        NotFoundError: unknown LLM or kind.
        InvalidInputError: no kind named and the LLM was measured on none or several.
    """
    llm = queries.get_llm(session, llm_name)
    kinds = queries.kinds_with_llm(session, llm.id) if kind_name is None else []
    if len(kinds) > 1:
        names = ", ".join(k.name for k in kinds)
        raise InvalidInputError(f"{llm_name} was run on {names}: name one (--device-kind)")
    kind = (
        kinds[0]
        if kinds
        else queries.get_device_kind(session, queries.sole_device_kind(session, kind_name))
    )
    runs = queries.generation_runs(session, llm.id, kind.id)
    peaks = best_peaks(kind_peaks(session, kind, kind.name), llm.dtype)
    return LlmKind(llm, kind, runs, peaks.bytes_per_s if peaks is not None else None)


def harvested_point(
    llm: Llm, batch: int | None, prompt: int | None, new_tokens: int | None
) -> tuple[int, int, int]:
    """Return (batch, prompt, new tokens), a size not given from the first point harvested.

    Raises:
        NotFoundError: a size to fill and no point harvested.
    """
    given = (batch, prompt, new_tokens)
    plans = (llm.info or {}).get("plans") or []
    if any(x is None for x in given) and not plans:
        raise NotFoundError(f"{llm.name} has no harvested point: give batch, prompt and new tokens")
    first = [int(plans[0][k]) for k in ("batch", "prompt", "new_tokens")] if plans else [0] * 3
    b, p, n = (x if x is not None else first[i] for i, x in enumerate(given))
    return b, p, n


def check_point(llm: Llm, batch: int, prompt: int, new_tokens: int) -> None:
    """Refuse a generation the LLM cannot run, in one line.

    Raises:
        InvalidInputError: a size below 1, or a context past the model's maximum.
    """
    if batch < 1 or prompt < 1 or new_tokens < 1:
        raise InvalidInputError(
            f"batch ({batch}), prompt ({prompt}) and new tokens ({new_tokens}) must be positive"
        )
    if llm.max_context is not None and prompt + new_tokens > llm.max_context:
        raise InvalidInputError(
            f"a context of {prompt + new_tokens} tokens is longer than {llm.name}'s maximum of "
            f"{llm.max_context}"
        )


def estimate_generation(
    session: Session,
    llm_name: str,
    kind_name: str | None,
    batch: int,
    prompt: int,
    new_tokens: int,
    *,
    pair: LlmKind | None = None,
    steps: Sequence[StepFigure] | None = None,
    source: StepSource = "operators",
) -> GenerationEstimate:
    """Compose a greedy generation of ``new_tokens`` from ``prompt`` tokens at ``batch``.

    ``source`` says what each step's figure is (:func:`step_figures`).

    Raises:
        NotFoundError: unknown LLM or kind.
        InvalidInputError: a bad size, or a context past the model's maximum.
    """
    pair = pair or llm_on_kind(session, llm_name, kind_name)
    llm, kind = pair.llm, pair.kind
    check_point(llm, batch, prompt, new_tokens)
    figures = list(steps) if steps is not None else step_figures(session, llm, kind, batch, source)
    at = [r for r in pair.runs if (r.batch, r.prompt, r.new_tokens) == (batch, prompt, new_tokens)]
    return compose_generation(
        llm.name,
        kind.name,
        batch,
        prompt,
        new_tokens,
        figures,
        between=_nearest_between(pair.runs, batch, prompt, new_tokens),
        reference=reference_of(at[0], {s.model: s.phase for s in figures}) if at else None,
        weight_bytes=llm.weight_bytes,
        kv_bytes_per_token=llm.kv_bytes_per_token,
        bandwidth_bytes_per_s=pair.bandwidth_bytes_per_s,
        memory_bytes=kind.memory_bytes,
        max_context=llm.max_context,
    )


def measured_table(
    session: Session, llm_name: str, kind_name: str | None, source: StepSource = "operators"
) -> list[GenerationEstimate]:
    """Return the estimate at every (batch, prompt, new tokens) with ``generate()`` runs stored.

    Raises:
        NotFoundError: unknown LLM or kind.
    """
    pair = llm_on_kind(session, llm_name, kind_name)
    figures = step_figures(session, pair.llm, pair.kind, source=source)
    return [
        estimate_generation(
            session, llm_name, None, r.batch, r.prompt, r.new_tokens, pair=pair, steps=figures
        )
        for r in pair.runs
    ]
