"""The report's displayed tables: (source column, header with its unit, formatter) each."""

from __future__ import annotations

from operator_db.report.document import (
    Columns,
    fixed,
    integer,
    num,
    percent,
    signed_percent,
    text,
)

MODEL_DISPLAY: Columns = [
    ("model", "model", text),
    ("device_kind", "device kind", text),
    ("mode", "mode", text),
    ("batch_size", "batch", integer),
    ("latency_s", "latency (ms)", num(1e3)),
    ("throughput_per_s", "throughput (samples/s)", num()),
    ("energy_per_call_j", "energy/call (J)", num()),
    ("step_flops", "GFLOPs/call", num(1e-9)),
    ("params", "params (M)", num(1e-6)),
    ("achieved_flops_per_s", "achieved GFLOP/s", num(1e-9)),
    ("estimate_s", "composed (ms)", num(1e3)),
    ("coverage", "coverage", percent),
    ("estimate_error", "composed error", signed_percent),
]

ESTIMATE_DISPLAY: Columns = [
    ("model", "model", text),
    ("device_kind", "device kind", text),
    ("total_time_s", "estimate (ms)", num(1e3)),
    ("full_run_time_s", "measured (ms)", num(1e3)),
    ("time_error", "error", signed_percent),
    ("error_interval", "error's interval", text),
    ("alone_error", "looped alone", signed_percent),
    ("context", "operators timed", text),
    ("bound_by", "bound by", text),
    ("host_busy_s", "host busy (ms)", num(1e3)),
    ("device_busy_s", "device busy (ms)", num(1e3)),
    ("syncs", "syncs", integer),
    ("host_cpu", "host CPU", text),
    ("sources", "figures from", text),
    ("full_run_source", "run from", text),
]

COMPLEXITY_DISPLAY: Columns = [
    ("family_name", "family", text),
    ("mode", "mode", text),
    ("batch_size", "batch", integer),
    ("model", "model", text),
    ("step_flops", "GFLOPs/call", num(1e-9)),
    ("params", "params (M)", num(1e-6)),
    ("activation_bytes", "activations (MB)", num(1e-6)),
    ("step_bytes", "traffic (MB)", num(1e-6)),
    ("intensity", "intensity (FLOP/B)", num(digits=3)),
]

BATCH_DISPLAY: Columns = [
    ("family_name", "family", text),
    ("device_kind", "device kind", text),
    ("batch_size", "batch", integer),
    ("model", "model", text),
    ("latency_s", "latency (ms)", num(1e3)),
    ("latency_per_sample_s", "latency/sample (ms)", num(1e3)),
    ("throughput_per_s", "throughput (samples/s)", num()),
    ("throughput_gain", "gain vs smallest batch (×)", fixed(2)),
]

ACHIEVED_DISPLAY: Columns = [
    ("model", "model", text),
    ("batch_size", "batch", integer),
    ("intensity", "intensity (FLOP/B)", num(digits=3)),
    ("achieved_flops_per_s", "achieved GFLOP/s", num(1e-9)),
    ("roof_flops_per_s", "roof GFLOP/s", num(1e-9)),
    ("of_roof", "of roof", percent),
    ("roof_label", "roof", text),
]

CORRELATION_DATA_DISPLAY: Columns = [
    ("model", "model", text),
    ("mode", "mode", text),
    ("batch_size", "batch", integer),
    ("cpu_latency_s", "CPU latency (ms)", num(1e3)),
    ("gpu_latency_s", "GPU latency (ms)", num(1e3)),
    ("flops", "GFLOPs/call", num(1e-9)),
    ("params", "params (M)", num(1e-6)),
]

RUN_FB_DISPLAY: Columns = [
    ("family_name", "family", text),
    ("batch_size", "batch", integer),
    ("device_kind", "device kind", text),
    ("latency_forward_s", "forward (ms)", num(1e3)),
    ("latency_training_s", "training step (ms)", num(1e3)),
    ("time_backward_s", "step − forward (ms)", num(1e3)),
    ("time_ratio", "time bwd:fwd", fixed(2)),
    ("flops_ratio", "FLOPs bwd:fwd", fixed(2)),
]

FB_MODEL_DISPLAY: Columns = [
    ("model", "model", text),
    ("device_kind", "device kind", text),
    ("calls", "op calls", integer),
    ("flops_forward", "forward GFLOPs", num(1e-9)),
    ("flops_backward", "backward GFLOPs", num(1e-9)),
    ("flops_ratio", "FLOPs bwd:fwd", fixed(2)),
    ("flops_coverage", "FLOPs coverage", percent),
    ("time_forward_s", "forward (ms)", num(1e3)),
    ("time_backward_s", "backward (ms)", num(1e3)),
    ("time_ratio", "time bwd:fwd", fixed(2)),
    ("time_coverage", "time coverage", percent),
]

FB_CONFIG_DISPLAY: Columns = [
    ("model", "model", text),
    ("op", "op", text),
    ("inputs", "inputs", text),
    ("count", "count", integer),
    ("device_kind", "device kind", text),
    ("flops_ratio", "FLOPs bwd:fwd", fixed(2)),
    ("time_forward_s", "forward (µs)", num(1e6)),
    ("time_training_s", "fwd+bwd (µs)", num(1e6)),
    ("time_ratio", "time bwd:fwd", fixed(2)),
    ("status", "status", text),
]

COUNTERS_DISPLAY: Columns = [
    ("model", "model", text),
    ("device_kind", "device kind", text),
    ("counted", "configurations counted", integer),
    ("configs", "of", integer),
    ("spec_flops", "spec GFLOPs", num(1e-9)),
    ("ncu_flops", "ncu FP GFLOPs", num(1e-9)),
    ("tensor_configs", "on tensor cores", integer),
    ("spec_bytes", "spec MB", num(1e-6)),
    ("dram_bytes", "ncu DRAM MB", num(1e-6)),
]

PREDICTION_DISPLAY: Columns = [
    ("model", "model", text),
    ("device_kind", "device kind", text),
    ("coverage", "measured calls", percent),
    ("coverage_predicted", "predicted calls", percent),
    ("total_time_s", "estimate ms", num(1e3)),
    ("total_time_low_s", "low ms", num(1e3)),
    ("total_time_high_s", "high ms", num(1e3)),
    ("full_run_time_s", "measured ms", num(1e3)),
    ("time_error", "error", signed_percent),
    ("predictor_version", "predictor", integer),
]
