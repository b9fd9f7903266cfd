"""Section 3 of ``bench/bench_gpu.py``: the interleaved estimate of four models at two batches.

Each case is harvested on the fly from a ``transformers:`` reference with the library's default
config (random weights, nothing downloaded), ingested into a fresh SQLite database, measured as
`opdb measure` does (one interleaved job of the model and all its configurations, then any
configuration left out of it alone), and estimated with ``estimate_model``. Times in s.
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from gpu_common import Budget, first_line
from pydantic import JsonValue

from operator_db.config import MeasureSettings, get_settings
from operator_db.db import queue
from operator_db.db.ingest import ingest_specs
from operator_db.db.store import Store
from operator_db.devices.base import Device
from operator_db.estimate.compose import Estimate, estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.harvest import harvest
from operator_db.measure.cuda_errors import is_sticky_cuda_error
from operator_db.specs import load_spec
from operator_db.specs.schema import TensorSpec
from operator_db.worker.daemon import Worker, WorkerEvent, WorkerOptions

TARGET_ERROR = 0.10
"""The review's target for the median absolute error over the cases (aiming at 3 %)."""
AIM_ERROR = 0.03

MODELS = (
    ("resnet50", "transformers:ResNetModel", "pixel_values"),
    ("mobilenetv2", "transformers:MobileNetV2Model", "pixel_values"),
    ("bert-base", "transformers:BertModel", "input_ids"),
    ("gpt2", "transformers:GPT2Model", "input_ids"),
)
"""Short name, reference, main input. GPT-2's ``Conv1D`` leaves are traced (they are matmuls
with parameters, which would otherwise be opaque and never measured)."""

TINY: dict[str, dict[str, JsonValue]] = {
    "resnet50": {"embedding_size": 8, "hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1]},
    "mobilenetv2": {"depth_multiplier": 0.35, "image_size": 32},
    "bert-base": {
        "num_hidden_layers": 1,
        "hidden_size": 32,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "vocab_size": 1000,
        "max_position_embeddings": 64,
    },
    "gpt2": {
        "n_layer": 1,
        "n_embd": 32,
        "n_head": 2,
        "vocab_size": 1000,
        "n_positions": 64,
        "bos_token_id": 0,
        "eos_token_id": 0,
    },
}
"""The dry run's configs: the same architectures, a few layers wide and deep."""


@dataclass(frozen=True)
class Case:
    """One model at one batch size."""

    name: str
    reference: str
    batch: int
    inputs: list[TensorSpec]
    overrides: dict[str, JsonValue] = field(default_factory=dict)


def cases(dry_run: bool) -> list[Case]:
    """Return the eight cases, batch 1 first: the GPU's (default configs) or the dry run's."""
    image, tokens = (32, 16) if dry_run else (224, 128)
    found = []
    for batch in (1, 2) if dry_run else (1, 64):
        for short, reference, main in MODELS:
            if main == "pixel_values":
                spec = TensorSpec(name=main, shape=[batch, 3, image, image])
            else:
                spec = TensorSpec(name=main, shape=[batch, tokens], dtype="int64")
            found.append(
                Case(
                    f"{short}{'-tiny' if dry_run else ''}-b{batch}",
                    reference,
                    batch,
                    [spec],
                    dict(TINY[short]) if dry_run else {},
                )
            )
    return found


def _figures(est: Estimate) -> dict[str, Any]:
    return {
        "operators_s": est.time_s,
        "between_ops_s": est.between_ops_s,
        "host_s": est.host_time_s,
        "estimate_s": est.total_time_s,
        "bound_by": est.bound_by,
        "measured_s": est.full_run_time_s,
        "error": est.time_error,
        "operators_error": est.operators_time_error,
        "coverage": est.coverage,
        "unmeasured": len(est.unmeasured),
        "opaque": est.opaque,
        "notes": list(est.notes),
        "pipeline": None if est.pipeline is None else est.pipeline.as_dict(),
        "context": est.context,
        "host_cpu": est.host_cpu,
    }


def _run_case(
    case: Case, store: Store, worker: Worker, kind: str, spec_dir: Path
) -> dict[str, Any]:
    """Harvest, ingest, measure (interleaved) and estimate one case."""
    row: dict[str, Any] = {}
    started = time.perf_counter()
    harvested = harvest(
        case.reference,
        case.inputs,
        name=case.name,
        overrides=case.overrides,
        custom_leaves="trace",
        description=f"{case.reference}, harvested by bench/bench_gpu.py",
    )
    path = harvested.write(spec_dir / f"{case.name}.yaml")
    row["harvest_s"] = time.perf_counter() - started
    row["configurations"] = harvested.configurations
    row["calls"] = harvested.calls
    loaded = load_spec(path, max_bytes=get_settings().max_spec_bytes)
    with store.transaction() as session:
        ingest_specs(session, [loaded])
    with store.transaction() as session:
        queued = queue.enqueue_model(session, case.name, kind, interleaved=True, remeasure=True)
    row["interleaved"] = queued.queued_model_run
    stats = worker.run()
    # As `opdb measure`: what the interleaved job left out is measured alone.
    with store.transaction() as session:
        rest = queue.enqueue_model(session, case.name, kind, with_model_run=False)
    row["measured_alone"] = rest.queued_configs
    if rest.queued_configs:
        stats = stats.plus(worker.run())
    row["jobs_done"], row["jobs_failed"] = stats.done, stats.failed
    row["job_errors"] = stats.errors[:5]
    with store.transaction(read_only=True) as session:
        row.update(_figures(estimate_model(session, case.name, kind)))
        # The method before the replay and the pipeline: operators looped alone, and on a GPU
        # the longer of the two stages.
        alone = estimate_model(session, case.name, kind, EstimateOptions(context="alone"))
        old = alone.total_time_s
        if not alone.adds_between and alone.host_time_s is not None:
            old = max(alone.time_s, alone.host_time_s)
        row["max_estimate_s"] = old
        measured = alone.full_run_time_s
        row["max_error"] = (old - measured) / measured if measured else None
        # Graph mode: the device stage with CUDA-graph times where measured, against the model
        # captured whole as one graph.
        graph = estimate_model(session, case.name, kind, EstimateOptions(timing="graph"))
        row["operators_graph_s"] = graph.time_s
        row["graph_estimate_s"] = graph.total_time_s
        row["graph_measured_s"] = graph.full_run_time_s if graph.full_run_time_s else None
        row["graph_error"] = graph.time_error
        if graph.full_run_time_s == alone.full_run_time_s:  # no graph-mode run: eager's
            row["graph_measured_s"] = row["graph_error"] = None
    return row


def run_estimates(
    device: Device,
    settings: MeasureSettings,
    overrides: dict[str, Any],
    budget: Budget,
    *,
    dry_run: bool,
    db_path: Path,
    min_case_s: float,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Run the cases that fit in the budget; return the section's figures.

    A case starts only when the budget has at least ``min_case_s`` left and 1.25× the longest
    case so far; the others are recorded as skipped, with why.
    """
    db_path.unlink(missing_ok=True)
    kind = device.identity().name
    rows: list[dict[str, Any]] = []
    longest = 0.0
    lost: str | None = None

    def on_event(event: WorkerEvent) -> None:
        if event.kind in ("claimed", "failed", "retry", "context_lost"):
            log(f"  worker {event.kind}: {event.message[:120]}")

    with Store.open(f"sqlite:///{db_path}") as store, tempfile.TemporaryDirectory() as tmp:
        worker = Worker(
            store, device, settings, WorkerOptions(until_idle=True, poll_s=0.1), on_event=on_event
        )
        for case in cases(dry_run):
            row: dict[str, Any] = {
                "name": case.name,
                "reference": case.reference,
                "batch": case.batch,
                "inputs": [t.model_dump(mode="json", exclude_none=True) for t in case.inputs],
                "overrides": case.overrides,
            }
            need = max(min_case_s, 1.25 * longest)
            left = budget.left_s()
            if lost is not None:
                row["status"], row["reason"] = "skipped", f"the CUDA context is lost ({lost})"
            elif left < need:
                row["status"] = "skipped"
                row["reason"] = f"budget: {left:.1f} s left, a case needs about {need:.1f} s"
            else:
                log(f"estimate {case.name}: start ({left:.0f} s of budget left)")
                start = time.perf_counter()
                try:
                    row.update(_run_case(case, store, worker, kind, Path(tmp)))
                    row["status"] = "done" if row.get("error") is not None else "failed"
                    if row["jobs_failed"]:
                        row["reason"] = f"{row['jobs_failed']} job(s) failed: {row['job_errors']}"
                except Exception as exc:  # noqa: BLE001 - record the case's failure, go on
                    row["status"], row["reason"] = "error", first_line(exc)
                    if is_sticky_cuda_error(exc) or worker.context_lost:
                        lost = worker.context_lost or first_line(exc)
                row["wall_s"] = time.perf_counter() - start
                longest = max(longest, row["wall_s"])
                gc.collect()
                if lost is None and device.torch_device().type == "cuda":
                    torch.cuda.empty_cache()
            log(f"estimate {case.name}: {row['status']} {row.get('reason') or ''}")
            rows.append(row)
    errors = [abs(r["error"]) for r in rows if r.get("error") is not None]
    median = statistics.median(errors) if errors else None
    verdict = None if median is None else "pass" if median <= TARGET_ERROR else "fail"
    # A dry run's figures are the CPU's: they get the status ``info``, the verdict kept apart.
    return {
        "device_kind": kind,
        "settings_overrides": overrides,
        "settings": settings.model_dump(),
        "database": str(db_path),
        "cases": rows,
        "median_abs_error": median,
        "cases_with_error": len(errors),
        "target": TARGET_ERROR,
        "aim": AIM_ERROR,
        "verdict": verdict,
        "status": "skipped" if verdict is None else "info" if dry_run else verdict,
    }
