"""Whole ``generate()`` runs timed on a device: the reference a composed generation meets.

A run is a greedy ``generate()`` of exactly ``new_tokens`` tokens (``min_new_tokens`` =
``max_new_tokens``) from a random prompt, as ``transformers`` runs it; a streamer timestamps each
token as ``generate()`` hands it out, so one run gives the time to the first token (TTFT: set-up,
the prefill and the first token's sampling), every decode step's time in order (the forward and
the host work between forwards), and the total. Energy is read from the device's counter around
each run, where it has one.

The *hollow* run is the same ``generate()`` with the model's forward replaced by one that returns
logits it computed once: what is left is the time ``generate()`` spends between the model's
forwards (set-up, logits processors, argmax, the stopping check that waits for the device, the
streamer). It is the generation's "time between operators", and runs interleaved with the real
ones so that both see the same machine.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from operator_db.devices.base import Device
from operator_db.llm.steps import generation_kwargs, text_config
from operator_db.stats import Interval, median_interval

TIGHT = 0.02
"""Half-width (relative) of the median's interval at which runs stop: TTFT and total both."""
MIN_RUNS = 5
"""Runs at least (each of the real and the hollow ones)."""


@dataclass(frozen=True)
class GenerateRun:
    """One ``generate()`` run: times in s, energy in J (None where not read)."""

    ttft_s: float
    steps_s: list[float]
    """Each decode step's time (token i to token i + 1), in order: new tokens − 1 of them."""
    total_s: float
    energy_j: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the run as JSON-ready data."""
        return {
            "ttft_s": self.ttft_s,
            "steps_s": self.steps_s,
            "total_s": self.total_s,
            "energy_j": self.energy_j,
        }


@dataclass(frozen=True)
class GenerationTimes:
    """``generate()`` runs at one (batch, prompt, new tokens), real and hollow, with statistics."""

    batch: int
    prompt: int
    new_tokens: int
    runs: list[GenerateRun]
    hollow: list[GenerateRun] = field(default_factory=list)
    energy_source: str | None = None
    energy_unavailable: str | None = None

    @property
    def ttft(self) -> Interval:
        """The median TTFT with its interval, s."""
        return median_interval([r.ttft_s for r in self.runs])

    @property
    def total(self) -> Interval:
        """The median time of a whole run with its interval, s."""
        return median_interval([r.total_s for r in self.runs])

    @property
    def tpot(self) -> Interval | None:
        """The median of (total − TTFT) / (new tokens − 1) with its interval, s; None for one."""
        if self.new_tokens < 2:
            return None
        return median_interval([(r.total_s - r.ttft_s) / (self.new_tokens - 1) for r in self.runs])

    @property
    def energy(self) -> Interval | None:
        """The median energy of a whole run with its interval, J; None where not read."""
        values = [r.energy_j for r in self.runs if r.energy_j is not None]
        return median_interval(values) if values else None

    @property
    def hollow_ttft_s(self) -> float | None:
        """Median TTFT of the hollow runs, s: ``generate()``'s set-up and first token's work."""
        return _median([r.ttft_s for r in self.hollow])

    @property
    def hollow_step_s(self) -> float | None:
        """Median time of a hollow decode step, s: ``generate()``'s work between two forwards."""
        return _median([s for r in self.hollow for s in r.steps_s])

    @property
    def hollow_total_s(self) -> float | None:
        """Median time of a whole hollow run, s."""
        return _median([r.total_s for r in self.hollow])


def _median(values: list[float]) -> float | None:
    return median_interval(values).value if values else None


class _Stamps:
    """A ``generate()`` streamer that keeps the time of each hand-out, ns."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.times: list[int] = []

    def put(self, value: Any) -> None:
        """Note the time: the prompt first, then each new token (on the host, after a sync)."""
        self.times.append(self.clock())

    def end(self) -> None:
        """Note the end of generation."""
        self.times.append(self.clock())


def one_run(
    lm: nn.Module,
    ids: torch.Tensor,
    new_tokens: int,
    device: Device,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> GenerateRun:
    """Time one greedy ``generate()`` of ``new_tokens`` tokens from ``ids``.

    Raises:
        MeasurementError: the streamer saw another number of tokens (a custom generation loop).
    """
    from operator_db.errors import MeasurementError

    stamps = _Stamps(clock)
    device.synchronize()
    energy0 = device.energy_mj()
    start = clock()
    with torch.no_grad():
        lm.generate(  # type: ignore[operator]
            ids,
            attention_mask=torch.ones_like(ids),
            streamer=stamps,
            **generation_kwargs(lm, new_tokens),
        )
    device.synchronize()
    end = clock()
    energy1 = device.energy_mj()
    t = stamps.times  # the prompt, each new token, the end
    if len(t) != new_tokens + 2:
        raise MeasurementError(
            f"generate() handed out {max(len(t) - 2, 0)} tokens for {new_tokens} through its "
            "streamer: a custom generation loop cannot be timed step by step"
        )
    energy = None if energy0 is None or energy1 is None else (energy1 - energy0) / 1e3
    return GenerateRun(
        ttft_s=(t[1] - start) / 1e9,
        steps_s=[(t[i + 1] - t[i]) / 1e9 for i in range(1, new_tokens)],
        total_s=(end - start) / 1e9,
        energy_j=energy,
    )


def hollowed(lm: nn.Module, batch: int) -> Callable[[], None]:
    """Replace ``lm``'s forward by one returning fixed logits; return the undo.

    The logits are those of one position per sequence in the model's dtype on its device, made
    once; the cache given is handed back as it came.
    """
    from transformers.modeling_outputs import CausalLMOutputWithPast

    parameter = next(lm.parameters())
    vocab = int(text_config(lm).vocab_size)
    logits = torch.zeros(batch, 1, vocab, dtype=parameter.dtype, device=parameter.device)

    @functools.wraps(lm.forward)
    def forward(*_args: Any, **kwargs: Any) -> Any:
        return CausalLMOutputWithPast(logits=logits, cache=kwargs.get("cache"))

    lm.forward = forward

    def undo() -> None:
        del lm.forward

    return undo


def time_generation(
    lm: nn.Module,
    batch: int,
    prompt: int,
    new_tokens: int,
    device: Device,
    *,
    budget_s: float = 60.0,
    tight: float = TIGHT,
    min_runs: int = MIN_RUNS,
    max_runs: int = 200,
    seed: int = 0,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> GenerationTimes:
    """Time ``generate()`` runs of ``lm`` and hollow ones, interleaved, until tight.

    After one warm-up of each, a real run and a hollow run alternate until the medians of the
    TTFT and the total are both known within ``tight`` (relative half-width of their 95 %
    interval) after at least ``min_runs`` each, or ``budget_s`` seconds are spent, or
    ``max_runs`` runs are made. The prompt is random token ids.

    Raises:
        MeasurementError: ``generate()`` handed out another number of tokens.
    """
    generator = torch.Generator(device="cpu").manual_seed(seed)
    vocab = int(text_config(lm).vocab_size)
    where = next(lm.parameters()).device
    ids = torch.randint(0, vocab, (batch, prompt), generator=generator).to(where)
    runs: list[GenerateRun] = []
    hollow: list[GenerateRun] = []

    def hollow_run() -> GenerateRun:
        undo = hollowed(lm, batch)
        try:
            return one_run(lm, ids, new_tokens, device, clock)
        finally:
            undo()

    one_run(lm, ids, new_tokens, device, clock)  # warm-up
    hollow_run()
    started = time.perf_counter()
    while len(runs) < max_runs:
        runs.append(one_run(lm, ids, new_tokens, device, clock))
        hollow.append(hollow_run())
        if len(runs) < min_runs:
            continue
        times = GenerationTimes(batch, prompt, new_tokens, runs)
        tight_now = all(i.half_width_ratio <= tight for i in (times.ttft, times.total))
        if tight_now or time.perf_counter() - started > budget_s:
            break
    energy_reason = device.energy_unavailable_reason()
    return GenerationTimes(
        batch,
        prompt,
        new_tokens,
        runs,
        hollow,
        energy_source=device.energy_scope() if energy_reason is None else None,
        energy_unavailable=energy_reason,
    )
