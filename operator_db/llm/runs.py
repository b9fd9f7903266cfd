"""Whole ``generate()`` runs timed on a device: the reference a composed generation meets.

A run is a greedy ``generate()`` of exactly ``new_tokens`` tokens (``min_new_tokens`` =
``max_new_tokens``) from a random prompt, as ``transformers`` runs it; a streamer timestamps each
token as ``generate()`` hands it out, so one run gives the time to the first token (TTFT: set-up,
the prefill and the first token's sampling), every decode step's time in order (the forward and
the host work between forwards), and the total. Energy is read from the device's counter around
each run, where it has one.

Each forward is timed where it runs (the model's forward wrapped: the device synchronised, the
clock read before and after; a synchronous CPU forward is unchanged by it, and a GPU's decode
step synchronises each step anyway, in its stopping check). What is left of a step is
``generate()``'s own time between forwards (logits processors, argmax, the stopping check, the
streamer): the generation's "time between operators", measured in its context. (A hollow
``generate()``, whose forward returns fixed logits, took 0.13 ms a step less on a CPU at batch 1:
its host work runs with warm caches, which a real step's does not.)
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from operator_db.devices.base import Device
from operator_db.llm.steps import generation_kwargs, text_config
from operator_db.llm.timings import GenerateRun, GenerationTimes

TIGHT = 0.02
"""Half-width (relative) of the median's interval at which runs stop: TTFT and total both."""
MIN_RUNS = 5
"""Runs at least."""


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


def _timed_forwards(
    lm: nn.Module, device: Device, clock: Callable[[], int], found: list[float]
) -> Callable[[], None]:
    """Wrap ``lm``'s forward so that each call's time (s) is appended to ``found``; return the undo.

    The device is synchronised before and after each forward, so the time is the forward's own.
    """
    forward = lm.forward

    @functools.wraps(forward)
    def timed(*args: Any, **kwargs: Any) -> Any:
        device.synchronize()
        start = clock()
        out = forward(*args, **kwargs)
        device.synchronize()
        found.append((clock() - start) / 1e9)
        return out

    lm.forward = timed

    def undo() -> None:
        del lm.forward

    return undo


def one_run(
    lm: nn.Module,
    ids: torch.Tensor,
    new_tokens: int,
    device: Device,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> GenerateRun:
    """Time one greedy ``generate()`` of ``new_tokens`` tokens from ``ids``, and each forward.

    Raises:
        MeasurementError: the streamer saw another number of tokens (a custom generation loop).
    """
    from operator_db.errors import MeasurementError

    stamps = _Stamps(clock)
    forwards: list[float] = []
    undo = _timed_forwards(lm, device, clock, forwards)
    try:
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
    finally:
        undo()
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
        forwards_s=forwards if len(forwards) >= new_tokens else [],
    )


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
    """Time ``generate()`` runs of ``lm`` until tight.

    After one warm-up, runs follow until the medians of the TTFT and the total are both known
    within ``tight`` (relative half-width of their 95 % interval) after at least ``min_runs``,
    or ``budget_s`` seconds are spent, or ``max_runs`` runs are made. The prompt is random token
    ids.

    Raises:
        MeasurementError: ``generate()`` handed out another number of tokens.
    """
    generator = torch.Generator(device="cpu").manual_seed(seed)
    vocab = int(text_config(lm).vocab_size)
    where = next(lm.parameters()).device
    ids = torch.randint(0, vocab, (batch, prompt), generator=generator).to(where)
    runs: list[GenerateRun] = []
    one_run(lm, ids, new_tokens, device, clock)  # warm-up
    started = time.perf_counter()
    while len(runs) < max_runs:
        runs.append(one_run(lm, ids, new_tokens, device, clock))
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
        energy_source=device.energy_scope() if energy_reason is None else None,
        energy_unavailable=energy_reason,
    )
