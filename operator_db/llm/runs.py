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
import math
import time
from collections.abc import Callable, Collection
from typing import Any

import torch
from torch import nn

from operator_db.devices.base import Device
from operator_db.llm.steps import generation_kwargs, text_config
from operator_db.llm.timings import MIN_RUNS, GenerateRun, GenerationTimes
from operator_db.measure.engine import Target

TIGHT = 0.02
"""Half-width (relative) of the median's interval at which runs stop: TTFT and total both."""


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
    job: str | None = None,
) -> GenerateRun:
    """Time one greedy ``generate()`` of ``new_tokens`` tokens from ``ids``, and each forward.

    ``job`` is the step model in whose job's rounds the run is made, kept with it.

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
        job=job,
    )


def prompt_ids(lm: nn.Module, batch: int, prompt: int, seed: int = 0) -> torch.Tensor:
    """Return a random prompt of ``batch`` × ``prompt`` token ids on the model's device."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    vocab = int(text_config(lm).vocab_size)
    where = next(lm.parameters()).device
    return torch.randint(0, vocab, (batch, prompt), generator=generator).to(where)


class GenerateAlongside:
    """``generate()`` runs made inside the rounds of the step models' interleaved jobs.

    A step model's job times the step and its operators in rounds, each target once a round in a
    random order (``measure_interleaved``). :meth:`target` is one more target of those rounds: in
    every ``every``-th round it makes one whole ``generate()`` run and keeps it, and in the
    other rounds nothing. The runs are thus taken at the same moments as the steps they are
    compared with: apart, a step's job and the runs drifted apart on a shared host (the same
    prefill step 28.9 ms in its job, 22.0 ms inside ``generate()`` a minute later, 23.6 ms in
    its job again after that). They join the rounds added until the step is tight as well: a
    prefill whose 20 rounds ran at 50–62 ms and its 71 added ones at 55–87 ms was composed 12 %
    above runs taken in the first 20 alone. The measurement's own timing of this target is
    meaningless and dropped: its untimed call (before each block, and in the warm-up that sizes
    the blocks) only arms the next call, and a block's further calls do nothing.

    ``budget_s`` bounds the runs' seconds, and each of the ``jobs`` jobs has an equal share of
    it: ``every`` is chosen from one run's time so that a job's ``rounds`` rounds make about half
    of its share, which leaves the other half to the rounds it adds until tight; no run is made
    that would take a job's runs past its share (their mean time so far taken as the next one's).
    Counted in rounds alone, the runs came to 37–98 a plan where the budget asked for about 40: a
    job that adds 71 rounds to its 20 multiplies them. With one budget for all the jobs, the
    first job's added rounds took it all (GPT-2 at batch 1, prompt 128: 42 runs in the prefill's
    job, 21 in the first decode step's, none in the second's), and each figure is compared with
    the runs of its own steps' jobs (``llm.estimate.reference_of``). So each job makes at least
    :data:`MIN_RUNS` runs, its share or not, ``every`` at most ``rounds`` / :data:`MIN_RUNS`:
    GPT-2's prefill at batch 8, prompt 512 made 3 runs in its job (two seconds each), too few to
    compare its TTFT with.
    """

    NAME = "generate() runs"
    """The target's name in a job's rounds."""

    def __init__(
        self,
        lm: nn.Module,
        ids: torch.Tensor,
        new_tokens: int,
        device: Device,
        *,
        budget_s: float,
        jobs: int,
        rounds: int,
        models: Collection[str] = (),
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.lm, self.ids, self.new_tokens, self.device, self.clock = (
            lm,
            ids,
            new_tokens,
            device,
            clock,
        )
        self.models = frozenset(models)
        """The step models whose jobs the runs join (:meth:`companions`)."""
        self.runs: list[GenerateRun] = []
        first = one_run(lm, ids, new_tokens, device, clock)  # warm-up, and a run's length
        self.budget_s = budget_s
        self.share_s = budget_s / max(jobs, 1)
        """Each job's seconds of runs at most."""
        per_round_s = max(self.share_s / 2, 1e-9) / max(rounds, 1)
        self.every = max(1, min(math.ceil(first.total_s / per_round_s), rounds // MIN_RUNS))
        self._armed = False
        self._rounds: dict[str, int] = {}
        self._spent: dict[str, float] = {}
        self._next_s = first.total_s

    @property
    def spent_s(self) -> float:
        """Seconds of the runs made so far (their ``total_s``)."""
        return sum(self._spent.values())

    def _arm(self) -> None:
        self._armed = True

    def _run(self, job: str) -> None:
        if not self._armed:
            return
        self._armed = False
        rounds = self._rounds[job] = self._rounds.get(job, 0) + 1
        spent = self._spent.get(job, 0.0)
        few = sum(r.job == job for r in self.runs) < MIN_RUNS
        if rounds % self.every == 0 and (few or spent + self._next_s <= self.share_s):
            run = one_run(self.lm, self.ids, self.new_tokens, self.device, self.clock, job)
            self.runs.append(run)
            self._spent[job] = spent + run.total_s
            self._next_s = self.spent_s / len(self.runs)

    def companions(self, model: str) -> list[Target]:
        """Return the targets a job of ``model`` adds: :meth:`target` for the step models."""
        return [self.target(model)] if model in self.models else []

    def target(self, job: str) -> Target:
        """Return the target the interleaved job of step model ``job`` adds to its rounds.

        Its runs are tagged with ``job``, so that each figure can be compared with the runs made
        in the jobs of the steps it is composed of (``llm.estimate.reference_of``).
        """
        return Target(
            self.NAME,
            functools.partial(self._run, job),
            energy=False,
            graph="never",
            tight=False,
            joins_added_rounds=True,
            untimed=self._arm,
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
    ids = prompt_ids(lm, batch, prompt, seed)
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
