"""Storing an LLM: its step models' specs (ingested as any spec) and its ``generate()`` runs."""

from __future__ import annotations

import socket
from collections.abc import Sequence

import torch
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.ingest import IngestResult, ingest_specs
from operator_db.db.llm_tables import GenerationRun, Llm
from operator_db.devices.base import Device
from operator_db.harvest.refs import load_model, parse_reference
from operator_db.llm.harvest import LlmHarvest
from operator_db.llm.runs import GenerateAlongside, one_run, prompt_ids
from operator_db.llm.timings import MIN_RUNS, GenerationTimes
from operator_db.measure.settings import MeasureSettings
from operator_db.ops.admission import admit_spec
from operator_db.ops.encoding import dtype_from_name
from operator_db.specs.io import parse_spec


def store_llm(session: Session, found: LlmHarvest, *, max_tensor_numel: int) -> list[IngestResult]:
    """Ingest the step models' specs (checked at the door) and record the LLM and its steps.

    Raises:
        SpecError: a step's spec is refused at the door.
        ConflictError: an LLM of that name is stored with another reference or dtype.
    """
    loaded = [
        admit_spec(
            parse_spec(s.result.spec.model_dump(mode="json"), s.result.spec.model.name),
            max_tensor_numel=max_tensor_numel,
        )
        for s in found.steps
    ]
    results = ingest_specs(session, loaded)
    llm = queries.put_llm(
        session,
        name=found.name,
        reference=found.reference,
        overrides=found.overrides,
        dtype=found.dtype,
        params=found.params,
        weight_bytes=found.weight_bytes,
        kv_bytes_per_token=found.kv_bytes_per_token,
        max_context=found.max_context,
        info=found.info,
    )
    for step in found.steps:
        model = queries.get_model(session, step.result.spec.model.name)
        queries.put_llm_step(
            session, llm.id, model.id, phase=step.phase, batch=step.batch, tokens=step.tokens
        )
    return results


def load_llm(llm: Llm, device: torch.device, seed: int = 0) -> torch.nn.Module:
    """Build the LLM on ``device`` in its dtype, random weights (seeded), for inference.

    Raises:
        HarvestError: the reference cannot be built.
    """
    torch.manual_seed(seed)
    lm = load_model(parse_reference(llm.reference, dict(llm.overrides)), device=str(device))
    return lm.to(dtype=dtype_from_name(llm.dtype)).eval()


def run_row(llm: Llm, times: GenerationTimes, kind_id: int, host_id: int | None) -> GenerationRun:
    """Return the row of one set of ``generate()`` runs (medians and intervals from the samples)."""
    tpot = times.tpot
    energy = times.energy
    ttft, total = times.ttft, times.total
    between_ttft, between_step = times.between_ttft, times.between_step
    return GenerationRun(
        llm_id=llm.id,
        device_kind_id=kind_id,
        host_id=host_id,
        batch=times.batch,
        prompt=times.prompt,
        new_tokens=times.new_tokens,
        dtype=llm.dtype,
        threads=torch.get_num_threads(),
        runs=len(times.runs),
        ttft_s=ttft.value,
        ttft_low_s=ttft.low,
        ttft_high_s=ttft.high,
        tpot_s=None if tpot is None else tpot.value,
        tpot_low_s=None if tpot is None else tpot.low,
        tpot_high_s=None if tpot is None else tpot.high,
        total_s=total.value,
        total_low_s=total.low,
        total_high_s=total.high,
        ci_level=total.level,
        between_ttft_s=None if between_ttft is None else between_ttft.value,
        between_step_s=None if between_step is None else between_step.value,
        between_tail_s=times.tail.value,
        energy_j=None if energy is None else energy.value,
        energy_low_j=None if energy is None else energy.low,
        energy_high_j=None if energy is None else energy.high,
        energy_source=times.energy_source,
        energy_unavailable=(times.energy_unavailable or "")[:500] or None,
        raw={"runs": [r.as_dict() for r in times.runs]},
        provenance={"torch": torch.__version__, "transformers": llm.info.get("transformers")},
    )


def generate_alongside(
    llm: Llm,
    device: Device,
    point: tuple[int, int, int],
    budget_s: float,
    models: Sequence[str],
    settings: MeasureSettings,
) -> GenerateAlongside:
    """Build the LLM on ``device`` for ``generate()`` runs inside its step models' jobs.

    ``point`` is (batch, prompt, new tokens); at most ``budget_s`` seconds of runs are spread
    over the rounds of the jobs of ``models`` (the point's step models): half over their
    ``settings.blocks`` rounds, the rest over those added until tight.

    Raises:
        MeasurementError: ``generate()`` cannot be timed (a custom generation loop).
        HarvestError: the LLM cannot be built.
    """
    batch, prompt, new_tokens = point
    device.activate()
    lm = load_llm(llm, device.torch_device())
    return GenerateAlongside(
        lm,
        prompt_ids(lm, batch, prompt),
        new_tokens,
        device,
        budget_s=budget_s,
        jobs=len(models),
        rounds=settings.blocks,
        models=models,
    )


def store_alongside(
    session: Session, llm: Llm, device: Device, alongside: GenerateAlongside
) -> GenerationTimes:
    """Store the runs made alongside the step models' jobs as the LLM's ``generate()`` runs.

    Runs follow, back to back, until there are :data:`MIN_RUNS` (a budget too small for the
    rounds, or jobs that failed). The device's kind and this host are registered as a worker
    registers them.
    """
    ident = device.identity()
    kind = queries.get_or_create_device_kind(session, ident.name, ident.device_type)
    kind.memory_bytes = kind.memory_bytes or ident.memory_bytes
    host = queries.get_or_create_host(session, socket.gethostname(), ident.device_id, kind.id)
    while len(alongside.runs) < MIN_RUNS:
        alongside.runs.append(
            one_run(alongside.lm, alongside.ids, alongside.new_tokens, device, alongside.clock)
        )
    batch, prompt = alongside.ids.shape
    reason = device.energy_unavailable_reason()
    times = GenerationTimes(
        int(batch),
        int(prompt),
        alongside.new_tokens,
        list(alongside.runs),
        energy_source=device.energy_scope() if reason is None else None,
        energy_unavailable=reason,
    )
    queries.add_generation_run(session, run_row(llm, times, kind.id, host.id))
    return times
