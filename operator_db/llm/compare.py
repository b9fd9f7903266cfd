"""One LLM's generation on every known device kind: which GPU serves it best.

One row per kind at one (batch, prompt, new tokens): the composed TTFT, TPOT, tokens/s and J/token,
each with its interval, and how it is known:

- **measured**: the kind has the step models' own figures (``opdb llm measure`` there), and
  ``generate()``'s time between forwards where it ran there;
- **predicted**: a GPU the cross-device model can place (``opdb predict across train``), each
  step model's operators predicted there (``predict.across.store.predicted_costs_many``). The
  time ``generate()`` spends between forwards is not known on a kind it never ran on: the
  figures are the forwards alone, and say so.

Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.queries.llm import StepModel
from operator_db.errors import OperatorDBError
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.llm.compose import GenerationEstimate, StepFigure, compose_generation
from operator_db.llm.estimate import check_point, estimate_generation, llm_on_kind, step_figures
from operator_db.stats import Interval

How = Literal["measured", "predicted"]


@dataclass(frozen=True)
class LlmKindRow:
    """The LLM's generation on one kind and how it is known."""

    how: How
    estimate: GenerationEstimate
    source: str
    """Where the step figures come from, in words."""

    def as_dict(self) -> dict[str, Any]:
        """Return the row as JSON-ready data."""
        return {"how": self.how, "source": self.source, **self.estimate.as_dict()}


def _measured_kinds(session: Session, steps: Sequence[StepModel]) -> list[str]:
    """Return the kinds with a figure of each of ``steps`` (its own or of its configurations)."""
    kinds: set[str] | None = None
    for step in steps:
        on = set(queries.kinds_measuring_model(session, step.model_id))
        kinds = on if kinds is None else kinds & on
    return sorted(kinds or ())


def _predicted_steps(
    session: Session, steps: Sequence[StepModel], names: list[str], found: Any
) -> tuple[dict[str, list[StepFigure]], dict[str, str]]:
    """Return each kind's predicted figures of ``steps``, and the kinds that failed, why."""
    from operator_db.predict.across.store import predicted_costs_many

    figures: dict[str, list[StepFigure]] = {n: [] for n in names}
    failed: dict[str, str] = {}
    for step in steps:
        many = predicted_costs_many(session, step.model_name, names, found)
        for name, predicted in many.items():
            if isinstance(predicted, OperatorDBError):
                failed[name] = str(predicted)
                continue
            est = estimate_model(
                session, step.model_name, name, EstimateOptions(peaks="best", predicted=predicted)
            )
            low, high = est.total_time_bounds_s
            if not est.predicted or low is None or high is None:
                failed[name] = f"{step.model_name} could not be predicted on {name}"
                continue
            level = float(predicted.source.get("level") or 0.9)
            time = Interval(est.total_time_s, low, high, level, "cross-device model")
            figures[name].append(
                StepFigure(step.phase, step.batch, step.tokens, time, None, step.model_name)
            )
    return {n: f for n, f in figures.items() if n not in failed}, failed


def compare_llm(
    session: Session,
    name: str,
    batch: int,
    prompt: int,
    new_tokens: int,
    *,
    on_error: Callable[[str, str], None] | None = None,
) -> list[LlmKindRow]:
    """Return the generation on every kind measured or predictable, fastest TPOT first.

    ``on_error(kind, message)`` hears of a GPU that could not be predicted (left out).

    Raises:
        NotFoundError: unknown LLM.
        InvalidInputError: a bad size, or a context past the model's maximum.
    """
    llm = queries.get_llm(session, name)
    check_point(llm, batch, prompt, new_tokens)
    rows: list[LlmKindRow] = []
    steps = [s for s in queries.llm_steps(session, llm.id) if s.batch == batch]
    measured = _measured_kinds(session, steps)
    for kind_name in measured:
        pair = llm_on_kind(session, name, kind_name)
        figures = step_figures(session, llm, pair.kind, batch)
        if len(figures) < len(steps):
            continue  # some step has no figure of its own there (a few configurations only)
        est = estimate_generation(
            session, name, kind_name, batch, prompt, new_tokens, pair=pair, steps=figures
        )
        rows.append(LlmKindRow("measured", est, "own measurements"))
    from operator_db.predict.across.store import gpu_kinds, load

    found = load(session)
    if found is not None:
        names = sorted(n for n in gpu_kinds(session) if n not in measured)
        predicted, failed = _predicted_steps(session, steps, names, found)
        for kind_name, message in failed.items():
            if on_error is not None:
                on_error(kind_name, message)
        version = found[1].version
        for kind_name, figures in predicted.items():
            pair = llm_on_kind(session, name, kind_name)
            est = compose_generation(
                llm.name, kind_name, batch, prompt, new_tokens, figures,
                weight_bytes=llm.weight_bytes, kv_bytes_per_token=llm.kv_bytes_per_token,
                bandwidth_bytes_per_s=pair.bandwidth_bytes_per_s,
                memory_bytes=pair.kind.memory_bytes, max_context=llm.max_context,
            )  # fmt: skip
            source = f"predicted by the cross-device model v{version}"
            rows.append(LlmKindRow("predicted", est, source))
    return sorted(rows, key=lambda r: (r.estimate.tpot is None, _value(r.estimate.tpot)))


def _value(x: Interval | None) -> float:
    return 0.0 if x is None else x.value
