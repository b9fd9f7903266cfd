"""A generation composed from its steps: TTFT, TPOT at every context, the total, tokens/s, J/token.

A greedy generation of N tokens from a prompt of P tokens at batch B is, in ``generate()``:

- **TTFT** = the prefill of P tokens + ``generate()``'s own work up to the first token (set-up,
  logits processing, argmax, the stopping check), measured in its runs as TTFT − the prefill's
  forward;
- **TPOT(c)** for each decode step over a cache of c = P … P + N − 2 tokens = the decode step at c
  + ``generate()``'s time between two forwards (a step − its forward, in the runs);
- **total** = TTFT + Σ_c TPOT(c) + the runs' tail (from the last token to the return).

The prefill and the decode steps are step models' estimates (composed from their operators, as
any model); a context between measured ones is interpolated linearly (the attention over the
cache and the cache's append grow linearly with it), one outside them extrapolated from the two
nearest, and each says so. Every figure carries its interval (``stats.Interval``): a weighted
sum of the measured figures' intervals, taken as independent.

The decode roofline: a step reads every weight once and each sequence's cache, so
TPOT(c) ≥ (weight bytes + B × (c + 1) × KV bytes per token) / memory bandwidth.

Pure Python: no torch, no database (``llm/estimate.py`` reads what this composes).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from operator_db.estimate.energy import positive_energy
from operator_db.llm.memory import Fit, fit_in_memory
from operator_db.stats import LEVEL, Interval, error_interval, exact, noise_verdict, sum_interval

How = Literal["measured", "interpolated", "extrapolated", "flat"]


@dataclass(frozen=True)
class StepFigure:
    """A step model's estimate on a kind: a prefill of ``tokens`` or a decode step over them."""

    phase: str
    batch: int
    tokens: int
    time: Interval
    """Per call, s."""
    energy: Interval | None = None
    """Per call, J; None where not measured."""
    model: str = ""
    idle_power_w: float | None = None
    """The device's idle power at the step's measured run, W; None where not known."""


@dataclass(frozen=True)
class Between:
    """``generate()``'s own time around the forwards, in its runs (each forward timed), s."""

    ttft: Interval
    """Set-up and the first token's work (TTFT − the prefill's forward)."""
    step: Interval
    """Between two decode forwards."""
    tail: Interval
    """From the last token to ``generate()``'s return."""
    at: tuple[int, int, int]
    """The (batch, prompt, new tokens) of the runs they come from."""


@dataclass(frozen=True)
class Reference:
    """Measured ``generate()`` runs at the same (batch, prompt, new tokens): the reference."""

    ttft: Interval
    tpot: Interval | None
    total: Interval
    energy: Interval | None
    runs: int
    steps_s: list[float] = field(default_factory=list)
    """The median time of each decode step over the runs, s, in order."""
    ttft_runs: int = 0
    """Of ``runs``, those ``ttft`` is the median of (made in the prefill's job); 0: all."""
    tpot_runs: int = 0
    """Of ``runs``, those ``tpot`` and ``steps_s`` are of (made in the decode jobs); 0: all."""

    def describe(self) -> str | None:
        """Say which runs the TTFT and TPOT are of, where not all; None where all."""
        parts = []
        if 0 < self.ttft_runs < self.runs:
            parts.append(f"TTFT against the {self.ttft_runs} made in the prefill's job")
        if 0 < self.tpot_runs < self.runs:
            parts.append(f"TPOT against the {self.tpot_runs} made in the decode steps' jobs")
        if not parts:
            return None
        return f"of the {self.runs} generate() runs, " + "; ".join(parts)


@dataclass(frozen=True)
class Point:
    """TPOT at one context: the decode step there plus the time between steps."""

    context: int
    time: Interval
    how: How


@dataclass
class GenerationEstimate:
    """A composed generation on a kind, against its measured ``generate()`` runs where stored."""

    llm: str
    device_kind: str
    batch: int
    prompt: int
    new_tokens: int
    ttft: Interval | None
    points: list[Point]
    total: Interval | None
    tpot: Interval | None
    """The mean decode step: (total − TTFT) / (new tokens − 1), s."""
    energy: Interval | None = None
    """The whole generation's energy, J: the forwards' energy, plus the device's idle power ×
    ``generate()``'s time between them where that power is known (``energy_between``)."""
    energy_between: Interval | None = None
    """Of ``energy``: idle power × ``generate()``'s time between forwards, J; None where not
    added (no idle power, or no time between forwards measured)."""
    between: Between | None = None
    reference: Reference | None = None
    bound_tpot_s: float | None = None
    """The decode roofline's TPOT, mean over the steps, s."""
    bandwidth_bytes_per_s: float | None = None
    kv_bytes_per_token: int = 0
    weight_bytes: int = 0
    fit: Fit | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float | None:
        """Generated tokens per second over the whole run (batch × new tokens / total)."""
        if self.total is None or self.total.value <= 0:
            return None
        return self.batch * self.new_tokens / self.total.value

    @property
    def joules_per_token(self) -> Interval | None:
        """Energy per generated token, J."""
        if self.energy is None:
            return None
        return self.energy.scaled(1 / (self.batch * self.new_tokens))

    @property
    def reference_joules_per_token(self) -> float | None:
        """The measured runs' energy per generated token, J; None where not read."""
        ref = self.reference
        if ref is None or ref.energy is None:
            return None
        return ref.energy.value / (self.batch * self.new_tokens)

    @property
    def bound_share(self) -> float | None:
        """The share of the decode roofline attained: bound TPOT / estimated TPOT (≤ 1)."""
        if self.bound_tpot_s is None or self.tpot is None or self.tpot.value <= 0:
            return None
        return self.bound_tpot_s / self.tpot.value

    def errors(self) -> dict[str, Interval]:
        """Return the estimate's error against the measured runs, per figure, with intervals."""
        ref = self.reference
        found: dict[str, Interval] = {}
        if ref is None:
            return found
        pairs = {"ttft": (self.ttft, ref.ttft), "tpot": (self.tpot, ref.tpot)}
        pairs["total"] = (self.total, ref.total)
        pairs["energy"] = (self.energy, ref.energy)
        for name, (mine, theirs) in pairs.items():
            if mine is not None and theirs is not None and mine.value > 0 and theirs.value > 0:
                found[name] = error_interval(mine, theirs)
        return found

    def as_dict(self) -> dict[str, Any]:
        """Return the estimate as JSON-ready data (times in s, energy in J; infinite ends None)."""
        found: dict[str, Any] = _finite(self._as_dict())
        return found

    def _as_dict(self) -> dict[str, Any]:

        def iv(x: Interval | None) -> dict[str, Any] | None:
            return None if x is None else x.as_dict()

        ref = self.reference
        return {
            "llm": self.llm,
            "device_kind": self.device_kind,
            "batch": self.batch,
            "prompt": self.prompt,
            "new_tokens": self.new_tokens,
            "ttft_s": iv(self.ttft),
            "tpot_s": iv(self.tpot),
            "total_s": iv(self.total),
            "tokens_per_s": self.tokens_per_s,
            "energy_j": iv(self.energy),
            "energy_between_j": iv(self.energy_between),
            "joules_per_token": iv(self.joules_per_token),
            "tpot_by_context": [
                {"context": p.context, "time_s": p.time.as_dict(), "how": p.how}
                for p in self.points
            ],
            "between_steps": None
            if self.between is None
            else {
                "ttft_s": self.between.ttft.as_dict(),
                "step_s": self.between.step.as_dict(),
                "tail_s": self.between.tail.as_dict(),
                "at": list(self.between.at),
            },
            "measured": None
            if ref is None
            else {
                "ttft_s": ref.ttft.as_dict(),
                "tpot_s": iv(ref.tpot),
                "total_s": ref.total.as_dict(),
                "energy_j": iv(ref.energy),
                "joules_per_token": self.reference_joules_per_token,
                "runs": ref.runs,
                "ttft_runs": ref.ttft_runs or ref.runs,
                "tpot_runs": ref.tpot_runs or ref.runs,
                "tokens_per_s": self.batch * self.new_tokens / ref.total.value,
                "steps_s": list(ref.steps_s),
            },
            "errors": {
                k: {**v.as_dict(), "verdict": noise_verdict(v)} for k, v in self.errors().items()
            },
            "roofline": {
                "bound_tpot_s": self.bound_tpot_s,
                "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
                "share_attained": self.bound_share,
            },
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "weight_bytes": self.weight_bytes,
            "fit": None
            if self.fit is None
            else {
                "memory_bytes": self.fit.memory_bytes,
                "tokens": self.fit.tokens,
                "max_context": self.fit.max_context,
                "max_batch": self.fit.max_batch,
            },
            "notes": self.notes,
        }


def _finite(value: Any) -> Any:
    """Return ``value`` with every NaN or infinite float, however deep, replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _sigma(x: Interval) -> float:
    """Return the larger standard error of a figure, in its unit."""
    lo, hi = x.sigmas()
    return max(lo, hi)


def weighted(
    figures: Sequence[Interval], weights: Sequence[float], level: float = LEVEL
) -> Interval:
    """Return Σ wᵢ·xᵢ with its interval: the figures' noise independent, in quadrature.

    Weights may be negative (an extrapolation): each figure's larger side counts, both ways.
    """
    value = sum(w * f.value for w, f in zip(weights, figures, strict=True))
    spread = math.sqrt(sum((w * _sigma(f)) ** 2 for w, f in zip(weights, figures, strict=True)))
    z = _z(level)
    return Interval(value, value - z * spread, value + z * spread, level, "weighted sum")


def _z(level: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + level / 2)


def line_weights(known: Sequence[int], at: int) -> tuple[dict[int, float], How]:
    """Return the weights of the known points (by index) that give the value ``at``, and how.

    Exact where ``at`` is known; linear between the two around it; linear from the two nearest
    outside them; the one value everywhere where only one is known.

    Raises:
        ValueError: no known point.
    """
    if not known:
        raise ValueError("no known point")
    order = sorted(range(len(known)), key=lambda i: known[i])
    xs = [known[i] for i in order]
    if at in xs:
        return {order[xs.index(at)]: 1.0}, "measured"
    if len(xs) == 1:
        return {order[0]: 1.0}, "flat"
    if xs[0] < at < xs[-1]:
        hi = next(i for i, x in enumerate(xs) if x > at)
        lo = hi - 1
        how: How = "interpolated"
    else:
        lo, hi = (0, 1) if at < xs[0] else (len(xs) - 2, len(xs) - 1)
        how = "extrapolated"
    w = (at - xs[lo]) / (xs[hi] - xs[lo])
    return {order[lo]: 1.0 - w, order[hi]: w}, how


def _combine(figures: Sequence[Interval], weights: Mapping[int, float]) -> Interval:
    items = sorted(weights.items())
    return weighted([figures[i] for i, _ in items], [w for _, w in items])


def compose_generation(
    llm: str,
    device_kind: str,
    batch: int,
    prompt: int,
    new_tokens: int,
    steps: Sequence[StepFigure],
    *,
    between: Between | None = None,
    reference: Reference | None = None,
    weight_bytes: int = 0,
    kv_bytes_per_token: int = 0,
    bandwidth_bytes_per_s: float | None = None,
    memory_bytes: int | None = None,
    max_context: int | None = None,
) -> GenerationEstimate:
    """Compose a greedy generation of ``new_tokens`` tokens from ``prompt`` at ``batch`` sequences.

    ``steps`` are the kind's step estimates (any batch: those at ``batch`` are used); ``between``
    is ``generate()``'s time around the forwards; ``reference`` the measured runs at the same
    point. The module documentation gives the formulas.
    """
    notes: list[str] = []
    prefills = [s for s in steps if s.phase == "prefill" and s.batch == batch]
    decodes = [s for s in steps if s.phase == "decode" and s.batch == batch]
    estimate = GenerationEstimate(
        llm, device_kind, batch, prompt, new_tokens, None, [], None, None,
        between=between, reference=reference, weight_bytes=weight_bytes,
        kv_bytes_per_token=kv_bytes_per_token, bandwidth_bytes_per_s=bandwidth_bytes_per_s,
        notes=notes,
    )  # fmt: skip
    measured_between = between is not None
    if reference is not None and (said := reference.describe()) is not None:
        notes.append(said)
    if between is None:
        notes.append(
            "generate()'s time between forwards is not measured on this kind (no generate() "
            "run): the figures are the forwards alone"
        )
        zero = exact(0.0)
        between = Between(zero, zero, zero, (batch, prompt, new_tokens))
    elif between.at != (batch, prompt, new_tokens):
        b, p, n = between.at
        notes.append(f"time between forwards from the runs at batch {b}, prompt {p}, {n} tokens")
    if not prefills:
        notes.append(f"no prefill measured at batch {batch}: no TTFT")
    else:
        weights, how = line_weights([s.tokens for s in prefills], prompt)
        prefill = _combine([s.time for s in prefills], weights)
        if how != "measured":
            notes.append(f"the prefill of {prompt} tokens is {how} from measured prompts")
        estimate.ttft = sum_interval([prefill, between.ttft])
    decode_sum: Interval | None = None
    decode_energy: Interval | None = None
    if new_tokens > 1 and not decodes:
        notes.append(f"no decode step measured at batch {batch}: no TPOT")
    elif new_tokens > 1:
        known = [s.tokens for s in decodes]
        totals: dict[int, float] = {}
        counts: dict[str, int] = {}
        for context in range(prompt, prompt + new_tokens - 1):
            weights, how = line_weights(known, context)
            counts[how] = counts.get(how, 0) + 1
            for i, w in weights.items():
                totals[i] = totals.get(i, 0.0) + w
            step = _combine([s.time for s in decodes], weights)
            estimate.points.append(Point(context, sum_interval([step, between.step]), how))
        decode_sum = _combine([s.time for s in decodes], totals)
        if all(s.energy is not None for s in decodes):
            decode_energy = _combine([s.energy for s in decodes if s.energy is not None], totals)
        said = ", ".join(f"{n} {how}" for how, n in counts.items())
        notes.append(f"decode contexts: {said} (measured at {', '.join(map(str, sorted(known)))})")
    if estimate.ttft is not None and (decode_sum is not None or new_tokens == 1):
        parts = [estimate.ttft, between.tail]
        if decode_sum is not None:
            parts += [decode_sum, between.step.scaled(new_tokens - 1)]
            estimate.tpot = sum_interval(
                [
                    decode_sum.scaled(1 / (new_tokens - 1)),
                    between.step,
                    between.tail.scaled(1 / (new_tokens - 1)),
                ]
            )
        estimate.total = sum_interval(parts)
    _energy(estimate, prefills, decode_energy, weights_of_prompt=prompt)
    if measured_between:
        _energy_between(estimate, [*prefills, *decodes], between)
    _energy_reference(estimate)
    if bandwidth_bytes_per_s and bandwidth_bytes_per_s > 0 and new_tokens > 1:
        contexts = range(prompt, prompt + new_tokens - 1)
        bounds = [
            (weight_bytes + batch * (c + 1) * kv_bytes_per_token) / bandwidth_bytes_per_s
            for c in contexts
        ]
        estimate.bound_tpot_s = sum(bounds) / len(bounds)
    if memory_bytes and kv_bytes_per_token > 0:
        estimate.fit = fit_in_memory(
            memory_bytes, weight_bytes, kv_bytes_per_token, batch, prompt + new_tokens, max_context
        )
    return estimate


def _energy(
    estimate: GenerationEstimate,
    prefills: Sequence[StepFigure],
    decode_energy: Interval | None,
    *,
    weights_of_prompt: int,
) -> None:
    """Fill the forwards' energy where every step has one and it sums above 0 J (else a note)."""
    known = [s for s in prefills if s.energy is not None]
    if not known or len(known) != len(prefills):
        if not known:
            estimate.notes.append("no energy: the steps have none measured")
        elif prefills:
            estimate.notes.append(
                f"no energy: {len(prefills) - len(known)} of {len(prefills)} prefill steps "
                "have none measured"
            )
        return
    if estimate.new_tokens > 1 and decode_energy is None:
        estimate.notes.append("no energy: the decode steps have none measured")
        return
    weights, _ = line_weights([s.tokens for s in known], weights_of_prompt)
    prefill = _combine([s.energy for s in known if s.energy is not None], weights)
    parts = [prefill] if decode_energy is None else [prefill, decode_energy]
    total = sum_interval(parts)
    value, no_energy = positive_energy(total.value, "the forwards' energy")
    estimate.energy = None if value is None else total
    estimate.notes += no_energy


def _energy_reference(estimate: GenerationEstimate) -> None:
    """Say why an energy estimate has no error against the measured runs, where it has none."""
    ref = estimate.reference
    if estimate.energy is None or ref is None:
        return
    if ref.energy is None:
        estimate.notes.append("no energy error: the measured generate() runs read no energy")
    elif ref.energy.value <= 0:
        estimate.notes.append(
            f"no energy error: the measured generate() runs' energy is {ref.energy.value:.4g} J"
        )


def _energy_between(
    estimate: GenerationEstimate, used: Sequence[StepFigure], between: Between
) -> None:
    """Add the device's idle power × ``generate()``'s time between forwards to the energy.

    Between forwards the device waits for the host (sampling, the stopping check), drawing its
    idle power, as a model's estimate counts it between kernels (``estimate/energy.py``); the
    power is the median of the steps' runs' idle baselines. A CPU's host work draws more than
    idle: there this part is a lower bound.
    """
    if estimate.energy is None:
        return
    powers = [p for s in used if (p := s.idle_power_w) is not None and p >= 0]
    if not powers or len(powers) != len(used):
        estimate.notes.append("no idle power known: the energy is the forwards' alone")
        return
    idle_w = statistics.median(powers)
    n = estimate.new_tokens
    time = sum_interval([between.ttft, between.step.scaled(n - 1), between.tail])
    added = time.scaled(idle_w)
    estimate.energy = sum_interval([estimate.energy, added])
    estimate.energy_between = added
    estimate.notes.append(
        f"energy: the forwards' plus {added.value:.4g} J between them (idle power "
        f"{idle_w:.4g} W × generate()'s {time.value * 1e3:.4g} ms around the forwards)"
    )
