"""Turn a job into result rows: rebuild the operator (or model), measure it, map to columns."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import FullModelRun, Job, Measurement, Model, OperatorConfig
from operator_db.db.store import Store
from operator_db.devices.base import Device
from operator_db.errors import NotFoundError, OperatorDBError
from operator_db.measure.cuda_errors import is_sticky_cuda_error
from operator_db.measure.engine import (
    GraphChoice,
    MeasureResult,
    Target,
    measure,
    measure_interleaved,
    operator_min_time_s,
)
from operator_db.measure.flags import Flag
from operator_db.measure.settings import MeasureSettings
from operator_db.measure.timing import Timing
from operator_db.specs.keys import nvtx_range_name
from operator_db.specs.schema import Mode

if TYPE_CHECKING:
    from operator_db.measure.model_run import ModelRun
    from operator_db.measure.replay import Replay
    from operator_db.ops.build import BuiltOp

Prepared = Callable[[], object]
"""One call of the target on inputs allocated once (what the engine loops)."""

_MODEL = "model"
_HOLLOW = "hollow"
_REPLAY = "replay"
"""Names of the whole model's targets in an interleaved job (configurations go by their key,
a 64-digit hex string, so the names cannot collide)."""


@dataclass(frozen=True)
class JobInfo:
    """What a job names, read in a short transaction before measuring (no lock held meanwhile)."""

    id: int
    target: str
    config_id: int | None
    model_id: int | None
    device_kind_id: int
    interleaved: bool = False
    """A model job that measures the model and its configurations in interleaved rounds."""

    @classmethod
    def of(cls, job: Job) -> JobInfo:
        """Copy the identifying fields of a job row."""
        return cls(
            job.id,
            job.target,
            job.config_id,
            job.model_id,
            job.device_kind_id,
            bool((job.options or {}).get("interleaved")),
        )


class Executor(Protocol):
    """Measures what a job names; returns unsaved result rows (the worker adds and commits them)."""

    def __call__(
        self,
        store: Store,
        job: JobInfo,
        device: Device,
        settings: MeasureSettings,
        idle_power_w: float | None,
    ) -> list[Measurement | FullModelRun]:
        """Measure ``job`` on ``device``; raise an OperatorDBError (or torch's) when it cannot."""


def result_columns(result: MeasureResult, timing: Timing, dtype: str) -> dict[str, Any]:
    """Map a measurement result (one timing method) to the shared result columns."""
    summary = timing.summary
    energy = result.energy_per_call if timing.method == "eager" else None
    time_ci = timing.interval()
    energy_ci = result.energy_interval() if energy is not None else None
    return {
        "dtype": dtype,
        "timing": timing.method,
        "cache_mode": result.cache_mode,
        "threads": result.threads,
        "calls_per_block": timing.calls_per_block,
        "blocks": len(timing.block_s),
        "time_median_s": summary.median,
        "time_mean_s": summary.mean,
        "time_iqr_s": summary.iqr,
        "time_cv": summary.cv,
        "time_low_s": time_ci.low,
        "time_high_s": time_ci.high,
        "time_ci_level": time_ci.level,
        "energy_low_j": None if energy_ci is None else energy_ci.low,
        "energy_high_j": None if energy_ci is None else energy_ci.high,
        "energy_ci_level": None if energy_ci is None else energy_ci.level,
        "trials": len(result.trials) if energy is not None else 0,
        "window_s": (
            sum(t.window.duration_s for t in result.trials) / len(result.trials)
            if energy is not None and result.trials
            else None
        ),
        "calls_per_window": result.trials[0].calls
        if energy is not None and result.trials
        else None,
        "window_time_per_call_s": result.window_time_per_call_s if energy is not None else None,
        "host_time_per_call_s": timing.host_per_call_s,
        "energy_source": result.energy_source if energy is not None else None,
        "energy_unavailable": result.energy_unavailable,
        "energy_per_call_j": energy.median if energy is not None else None,
        "dynamic_energy_per_call_j": result.dynamic_energy_per_call_j
        if energy is not None
        else None,
        "energy_iqr_j": energy.iqr if energy is not None else None,
        "power_mean_w": result.power_mean_w if energy is not None else None,
        "idle_power_w": result.idle_power_w,
        "energy_disagreement": result.disagreement if energy is not None else None,
        "flags": sorted({str(f) for f in (*result.flags, *timing.flags)}),
        "raw": result.raw() if timing.method == "eager" else {"timing": timing.block_s},
        "provenance": result.provenance,
    }


def _grad_mode(mode: str) -> AbstractContextManager[object]:
    """Return the autograd mode to measure in: no_grad for inference, entered once per job."""
    return torch.no_grad() if mode == "inference" else contextlib.nullcontext()


def _config_dtype(config: OperatorConfig) -> str:
    """Return the dtype a configuration is measured in (its own, else its first input's)."""
    return config.dtype or (config.inputs[0]["dtype"] if config.inputs else "float32")


def _job_model(session: Session, job: JobInfo) -> Model:
    """Return the model a model job names.

    Raises:
        NotFoundError: it was deleted since the job was queued.
    """
    model = session.get(Model, job.model_id)
    if model is None:
        raise NotFoundError(f"model {job.model_id} no longer exists")
    return model


def _prepare_operator(config: OperatorConfig, device: Device, settings: MeasureSettings) -> BuiltOp:
    from operator_db.ops import build_op

    mode: Mode = "training" if config.mode == "training" else "inference"
    return build_op(
        queries.config_spec(config), mode=mode, device=device.torch_device(), seed=settings.seed
    )


def _prepare_replay(
    model: Model,
    positions: dict[int, str],
    built: dict[str, BuiltOp],
    device: Device,
    settings: MeasureSettings,
) -> Replay | None:
    """Return the replay of the model's call order over its built configurations, where one runs.

    It runs for an inference model whose spec has its call order, with ``settings.replay``: on a
    CPU a call's time is its cost; on a GPU the passes alternate between the host's issue time
    of each call and the device's time between CUDA events (``measure/replay.py``).
    ``positions`` maps a configuration's position in the spec to its key; calls of
    configurations not built (opaque, left out) are not replayed.
    """
    from operator_db.measure.replay import CudaCallTimer, Replay

    where = device.torch_device().type
    if not settings.replay or model.mode != "inference" or not model.calls:
        return None
    if where not in ("cpu", "cuda"):
        return None
    calls = [
        (positions[p], built[positions[p]])
        for p in model.calls
        if p in positions and positions[p] in built
    ]
    if not calls:
        return None
    return Replay(calls, device_timer=CudaCallTimer() if where == "cuda" else None)


def _prepare_model(
    session: Session, model: Model, device: Device, settings: MeasureSettings
) -> ModelRun:
    """Rebuild the model, with a hollow run that stubs the modules its spec records."""
    from operator_db.measure.model_run import prepare_model_run

    modules = queries.model_configs(session, model.id, form="module")
    return prepare_model_run(
        model.reference,
        model.overrides,
        model.mode,
        model.dtype,
        model.inputs,
        device=device.torch_device(),
        seed=settings.seed,
        stub={name for mc in modules for name in mc.locations},
    )


def _config_rows(
    job: JobInfo, config_id: int, dtype: str, result: MeasureResult
) -> list[Measurement]:
    """Return a configuration's result rows, one per timing method (eager, graph)."""
    return [
        Measurement(
            config_id=config_id,
            device_kind_id=job.device_kind_id,
            job_id=job.id,
            **result_columns(result, timing, dtype),
        )
        for timing in result.timings
    ]


def _model_rows(
    job: JobInfo,
    model_id: int,
    dtype: str,
    result: MeasureResult,
    hollow: MeasureResult | None,
    prepared: ModelRun,
) -> list[FullModelRun]:
    """Return the model's result rows; the eager one carries the hollow run's time and samples."""
    rows = []
    for timing in result.timings:
        row = FullModelRun(
            model_id=model_id,
            device_kind_id=job.device_kind_id,
            job_id=job.id,
            **result_columns(result, timing, dtype),
        )
        if hollow is not None and timing.method == "eager":
            row.hollow_time_s = hollow.eager.summary.median
            row.hollow_host_time_s = hollow.eager.host_per_call_s
            row.provenance = {
                **row.provenance,
                "hollow": {
                    "stubbed_modules": prepared.stubbed,
                    "calls_per_block": hollow.eager.calls_per_block,
                    "block_s": list(hollow.eager.block_s),
                    "flags": [str(f) for f in hollow.eager.flags],
                },
            }
        if prepared.hollow_unavailable and timing.method == "eager":
            row.flags = sorted({*row.flags, Flag.HOLLOW_UNAVAILABLE.value})
            row.provenance = {**row.provenance, "hollow_unavailable": prepared.hollow_unavailable}
        rows.append(row)
    return rows


Companions = Callable[[str], Sequence[Target]]
"""A model's name → more targets for its interleaved job's rounds, which keep what they measure
themselves (``llm.runs.GenerateAlongside``: ``generate()`` runs beside a step model's job)."""


def execute_job(
    store: Store,
    job: JobInfo,
    device: Device,
    settings: MeasureSettings,
    idle_power_w: float | None,
    *,
    companions: Companions | None = None,
) -> list[Measurement | FullModelRun]:
    """Measure the job's configuration (eager, and graph where timed) or its whole model.

    An interleaved model job measures the model and every measurable configuration of it together
    (:func:`measure_interleaved`); a configuration that cannot be rebuilt is left out (its own
    operator job will say why) and named in the model run's provenance. ``companions`` add
    targets to an interleaved job's rounds (their results are not stored: they keep their own).

    The target is read in a short read-only transaction; nothing is locked while measuring.

    Raises:
        NotFoundError: the configuration or model is gone.
        OperatorDBError: the op cannot be rebuilt or measured.
    """
    if job.config_id is not None:
        with store.transaction(read_only=True) as session:
            config = session.get(OperatorConfig, job.config_id)
            if config is None:
                raise NotFoundError(f"configuration {job.config_id} no longer exists")
            dtype = _config_dtype(config)
            config_id, config_mode, key = config.id, config.mode, config.key
            run = _prepare_operator(config, device, settings).run
        with _grad_mode(config_mode):
            result = measure(
                run,
                device,
                settings,
                idle_power=idle_power_w,
                min_time_s=operator_min_time_s(device, settings),
                nvtx_range=nvtx_range_name(key),
            )
        return [*_config_rows(job, config_id, dtype, result)]
    if job.interleaved:
        return _execute_interleaved(store, job, device, settings, idle_power_w, companions)
    with store.transaction(read_only=True) as session:
        model = _job_model(session, job)
        model_id, model_dtype, model_mode = model.id, model.dtype, model.mode
        prepared = _prepare_model(session, model, device, settings)
    with _grad_mode(model_mode):
        result = measure(
            prepared.run,
            device,
            settings,
            idle_power=idle_power_w,
            min_time_s=settings.model_min_time_s,
            graph=_model_graph(model_mode, settings),
        )
        hollow = None
        if prepared.hollow is not None and settings.hollow_run:
            hollow = measure(prepared.hollow, device, settings.model_copy(update={"energy": False}))
    return [*_model_rows(job, model_id, model_dtype, result, hollow, prepared)]


def _execute_interleaved(
    store: Store,
    job: JobInfo,
    device: Device,
    settings: MeasureSettings,
    idle_power_w: float | None,
    companions: Companions | None = None,
) -> list[Measurement | FullModelRun]:
    with store.transaction(read_only=True) as session:
        model = _job_model(session, job)
        model_id, model_dtype, model_mode, model_name = (
            model.id,
            model.dtype,
            model.mode,
            model.name,
        )
        model_run = _prepare_model(session, model, device, settings)
        every = queries.model_configs(session, model_id)
        positions = {mc.position: mc.config.key for mc in every}
        configs = [mc.config for mc in every if mc.config.form != "opaque"]
        built: dict[str, BuiltOp] = {}
        prepared: dict[str, tuple[int, str]] = {}
        targets: list[Target] = []
        op_min_time_s = operator_min_time_s(device, settings)
        left_out: dict[str, str] = {}
        for config in configs:
            try:
                op = _prepare_operator(config, device, settings)
            except (OperatorDBError, RuntimeError, ValueError, TypeError) as exc:
                if is_sticky_cuda_error(exc):
                    raise  # no configuration after it could be built: the worker must restart
                left_out[config.key] = str(exc).strip().splitlines()[0] if str(exc) else "failed"
                continue
            prepared[config.key] = (config.id, _config_dtype(config))
            built[config.key] = op
            targets.append(
                Target(
                    config.key,
                    op.run,
                    min_time_s=op_min_time_s,
                    nvtx_range=nvtx_range_name(config.key),
                )
            )
        replay = _prepare_replay(model, positions, built, device, settings)
    if replay is not None:
        # The estimate composes the operators as the replay times them: the replay, the model
        # and its hollow run are measured until tight; the operators looped alone, their rounds.
        targets = [dataclasses.replace(t, tight=False) for t in targets]
    targets.append(
        Target(
            _MODEL,
            model_run.run,
            # With a replay, the model's blocks are not lengthened to model_min_time_s (measuring
            # until tight gives it the time instead): its blocks and the replay's passes then
            # span the same stretch of time, one call each where a call outlasts block_min_s,
            # and their medians compare like with like. On a VM whose speed switched between two
            # states, the median of 5-call blocks fell between the states and the median of
            # single passes in one of them: the estimate was off by the gap.
            min_time_s=0.0 if replay is not None else settings.model_min_time_s,
            graph=_model_graph(model_mode, settings),
        )
    )
    if model_run.hollow is not None:
        targets.append(Target(_HOLLOW, model_run.hollow, energy=False, graph="never"))
    if replay is not None:
        targets.append(Target(_REPLAY, replay, energy=False, graph="never", untimed=replay.untimed))
    if companions is not None:
        targets += companions(model_name)
    with _grad_mode(model_mode):
        measured = measure_interleaved(targets, device, settings, idle_power=idle_power_w)
    results = {r.target: r for r in measured}
    rows: list[Measurement | FullModelRun] = []
    for key, (config_id, dtype) in prepared.items():
        rows.extend(_config_rows(job, config_id, dtype, results[key]))
    model_result = results[_MODEL]
    if left_out:
        model_result = dataclasses.replace(
            model_result,
            flags=(*model_result.flags, Flag.INTERLEAVED_PARTIAL),
            provenance={**model_result.provenance, "left_out": left_out},
        )
    model_rows = _model_rows(
        job, model_id, model_dtype, model_result, results.get(_HOLLOW), model_run
    )
    if replay is not None:
        ids = {key: config_id for key, (config_id, _) in prepared.items()}
        for row in model_rows:
            if row.timing == "eager":
                row.replay = _replay_column(replay, results[_REPLAY], ids)
    rows.extend(model_rows)
    return rows


def _model_graph(mode: str, settings: MeasureSettings) -> GraphChoice:
    """Return when a whole model is timed as a CUDA graph: always (``settings.model_graph``)."""
    return "always" if settings.model_graph and mode == "inference" else "auto"


def _replay_column(replay: Replay, result: MeasureResult, ids: dict[str, int]) -> dict[str, Any]:
    """Return a model run's ``replay`` column: per configuration id, its time in the replay."""
    figures = replay.figures()
    return {
        "per_call_s": {str(ids[key]): s for key, s in figures.per_call_s.items()},
        "host_per_call_s": None
        if figures.host_per_call_s is None
        else {str(ids[key]): s for key, s in figures.host_per_call_s.items()},
        "per_call_low_s": None
        if figures.per_call_interval_s is None
        else {str(ids[key]): lo for key, (lo, _) in figures.per_call_interval_s.items()},
        "per_call_high_s": None
        if figures.per_call_interval_s is None
        else {str(ids[key]): hi for key, (_, hi) in figures.per_call_interval_s.items()},
        "total": None if figures.total is None else figures.total.as_dict(),
        "time_s": result.eager.summary.median,
        "passes": figures.passes,
        "calls": figures.calls,
        "chained": figures.chained,
        "copies": figures.copies,
        "caught_up": figures.caught_up,
        "flags": [str(f) for f in result.eager.flags],
    }
