"""Timing generate() runs: TTFT, each step and each forward, the total; energy."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
import torch

from operator_db.devices.fake import FakeDevice
from operator_db.errors import MeasurementError
from operator_db.harvest.refs import load_model, parse_reference
from operator_db.llm.runs import GenerateAlongside, one_run, prompt_ids, time_generation
from operator_db.llm.timings import MIN_RUNS
from operator_db.measure.engine import Target, measure_interleaved
from operator_db.measure.settings import fast_settings
from tests.llm.common import LLAMA, LLAMA_SMALL


@pytest.fixture
def lm() -> torch.nn.Module:
    torch.manual_seed(0)
    return load_model(parse_reference(LLAMA, LLAMA_SMALL), device="cpu").eval()


def test_one_run_times_the_first_token_each_step_and_the_total(lm: torch.nn.Module) -> None:
    ids = torch.randint(0, 256, (2, 8))
    with FakeDevice(power_mw=50_000, update_period_s=0.001) as device:
        run = one_run(lm, ids, 5, device)
    assert len(run.steps_s) == 4
    assert 0 < run.ttft_s < run.total_s
    assert run.ttft_s + sum(run.steps_s) <= run.total_s
    assert run.energy_j is not None and run.energy_j >= 0


def test_time_generation_times_each_forward_inside_the_runs(lm: torch.nn.Module) -> None:
    with FakeDevice(power_mw=50_000, update_period_s=0.001) as device:
        times = time_generation(lm, 1, 8, 4, device, budget_s=0.0, min_runs=3)
    assert len(times.runs) == 3
    assert times.ttft.low <= times.ttft.value <= times.ttft.high
    assert times.tpot is not None and times.energy is not None
    for run in times.runs:
        assert len(run.forwards_s) == 4  # the prefill and three decode steps
        assert 0 < run.forwards_s[0] < run.ttft_s
        assert all(0 < f < s for f, s in zip(run.forwards_s[1:], run.steps_s, strict=True))
        assert run.between_ttft_s is not None and run.between_ttft_s > 0
        assert len(run.between_steps_s) == 3 and min(run.between_steps_s) > 0
    assert times.between_step is not None and times.between_step.value > 0
    assert times.between_ttft is not None and times.tail.value >= 0
    assert "forward" not in vars(lm)  # the model is itself again


def test_a_loop_that_hands_out_other_tokens_cannot_be_timed(lm: torch.nn.Module) -> None:
    def short(*_args: object, **_kwargs: object) -> torch.Tensor:
        return torch.zeros(1, 9, dtype=torch.long)  # no streamer call at all

    lm.generate = short  # type: ignore[method-assign]
    with FakeDevice() as device, pytest.raises(MeasurementError, match="handed out 0 tokens"):
        one_run(lm, torch.zeros(1, 8, dtype=torch.long), 4, device)


def test_runs_alongside_are_made_inside_a_jobs_rounds(lm: torch.nn.Module) -> None:
    """One ``generate()`` run every ``every``-th round of an interleaved measurement, nothing
    in the other rounds, the warm-up or a block's further calls; the rounds added until tight
    too."""
    settings = fast_settings(blocks=6, tight_ratio=0.0)
    with FakeDevice() as device:
        every_round = GenerateAlongside(
            lm, prompt_ids(lm, 1, 8), 3, device, budget_s=1e6, jobs=1, rounds=6, models=["s"]
        )
        assert every_round.every == 1
        assert every_round.companions("other") == []
        (target,) = every_round.companions("s")
        ticks: list[int] = []
        measure_interleaved([Target("step", lambda: ticks.append(1)), target], device, settings)
        assert len(every_round.runs) == settings.blocks
        assert all(len(r.steps_s) == 2 for r in every_round.runs)
        assert {r.job for r in every_round.runs} == {"s"}  # each run knows its job

        sparse = GenerateAlongside(
            lm, prompt_ids(lm, 1, 8), 3, device, budget_s=1e-9, jobs=1, rounds=6, models=["s"]
        )
        assert sparse.every == 1  # a budget too small for one run: MIN_RUNS in 6 rounds
        measure_interleaved([sparse.target("s")], device, settings)
        assert len(sparse.runs) == MIN_RUNS  # the fewest a figure is compared with


def _seconds_clock() -> Callable[[], int]:
    """Return a clock (ns) that reads one second later every time it is read."""
    return functools.partial(next, iter(range(0, 10**15, 10**9)))


def test_runs_alongside_keep_to_their_budget_in_seconds(lm: torch.nn.Module) -> None:
    """The runs stop at ``budget_s`` seconds however many rounds a job adds until tight, and
    half the budget is left to the added rounds."""
    clock = _seconds_clock()
    # a round cap, not a time budget, ends the added rounds: on a slow host eight generate() runs
    # outlast any short budget (CI: two added rounds in 0.56 s of a 0.3 s budget)
    settings = fast_settings(blocks=4, tight_ratio=1e-12, tight_budget_s=60.0, max_blocks=16)
    with FakeDevice() as device:
        first = one_run(lm, prompt_ids(lm, 1, 8), 3, device, clock)
        alongside = GenerateAlongside(
            lm, prompt_ids(lm, 1, 8), 3, device, budget_s=8 * first.total_s, jobs=1, rounds=4,
            models=["s"], clock=clock,
        )  # fmt: skip
        assert alongside.every == 1  # half the budget, 4 runs, over 4 rounds: one a round
        steps = Target("step", lambda: None)
        result = measure_interleaved([steps, alongside.target("steps")], device, settings)
    assert len(result[0].eager.block_s) > 8  # the job added rounds until its tight budget
    assert len(alongside.runs) == 8 and alongside.spent_s == 8 * first.total_s


def test_each_figure_meets_the_runs_made_in_its_steps_jobs() -> None:
    """The TTFT is compared with the runs made in the prefill's job, the TPOT with those made
    in the decode steps' jobs, the total with all; with too few in a phase's jobs, with all."""
    from types import SimpleNamespace

    from operator_db.llm.compose import compose_generation
    from operator_db.llm.estimate import reference_of
    from operator_db.llm.store import run_row
    from operator_db.llm.timings import MIN_RUNS, GenerateRun, GenerationTimes

    def run(ttft: float, step: float, job: str | None) -> GenerateRun:
        return GenerateRun(ttft, [step] * 3, ttft + 3 * step, job=job)

    slow = [run(0.4, 0.03, "prefill") for _ in range(MIN_RUNS)]
    fast = [run(0.3, 0.02, d) for d in ("d1", "d2") for _ in range(MIN_RUNS)]
    llm = SimpleNamespace(id=1, dtype="float32", info={})
    row = run_row(llm, GenerationTimes(8, 512, 4, slow + fast), 1, None)  # type: ignore[arg-type]
    assert row.ttft_s == pytest.approx(0.3)  # of all runs, the decode jobs' prevail
    phases = {"prefill": "prefill", "d1": "decode", "d2": "decode"}
    ref = reference_of(row, phases)
    assert ref.ttft.value == pytest.approx(0.4) and ref.ttft_runs == MIN_RUNS
    assert ref.tpot is not None and ref.tpot.value == pytest.approx(0.02)
    assert ref.tpot_runs == 2 * MIN_RUNS and ref.steps_s == pytest.approx([0.02] * 3)
    assert ref.total.value == pytest.approx(row.total_s) and ref.runs == 3 * MIN_RUNS
    said = compose_generation("m", "k", 8, 512, 4, [], reference=ref).notes
    assert "of the 15 generate() runs, TTFT against the 5 made in the prefill's job" in said[0]

    untagged = reference_of(row)  # no phases known: all runs
    assert untagged.ttft.value == pytest.approx(0.3) and untagged.describe() is None
    few = run_row(llm, GenerationTimes(8, 512, 4, slow[:2] + fast), 1, None)  # type: ignore[arg-type]
    assert reference_of(few, phases).ttft_runs == few.runs  # 2 in the prefill's job: all


def test_each_job_has_its_share_of_the_runs_budget(lm: torch.nn.Module) -> None:
    """A job that adds rounds until tight takes its share of the budget, not the next job's."""
    clock = _seconds_clock()
    # a round cap ends the added rounds, not a time budget a slow host would spend first
    loose = fast_settings(blocks=4, tight_ratio=1e-12, tight_budget_s=60.0, max_blocks=12)
    with FakeDevice() as device:
        first = one_run(lm, prompt_ids(lm, 1, 8), 3, device, clock)
        alongside = GenerateAlongside(
            lm, prompt_ids(lm, 1, 8), 3, device, budget_s=12 * first.total_s, jobs=2, rounds=4,
            models=["a", "b"], clock=clock,
        )  # fmt: skip
        for job in ("a", "b"):
            (target,) = alongside.companions(job)
            measure_interleaved([Target("step", lambda: None), target], device, loose)
    jobs = [r.job for r in alongside.runs]
    assert jobs.count("a") == 6 and jobs.count("b") == 6  # 12 runs' budget, half each
    assert alongside.spent_s == 12 * first.total_s
