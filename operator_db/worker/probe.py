"""Call each configuration of a model once inside its NVTX range, for Nsight Compute (docs/ncu.md).

What ``opdb ncu probe`` runs under ``ncu``: no timing, no energy, nothing stored, so neither the
profiler's overhead nor its serialised kernels reach a stored result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from operator_db.db import queries
from operator_db.db.store import Store
from operator_db.devices.base import Device
from operator_db.errors import DeviceUnsupportedError, OperatorDBError
from operator_db.measure import nvtx
from operator_db.measure.cuda_errors import is_sticky_cuda_error
from operator_db.measure.settings import MeasureSettings
from operator_db.specs.keys import nvtx_range_name
from operator_db.worker.execute import _grad_mode, _prepare_operator


@dataclass
class ProbeResult:
    """What a probe ran: configurations called in their range, those that could not be built."""

    model: str
    probed: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    """Key → the first line of why its configuration could not be built or run."""


def probe_model(
    store: Store, model_name: str, device: Device, settings: MeasureSettings
) -> ProbeResult:
    """Run each measurable configuration of ``model_name`` once in its NVTX range on ``device``.

    Each is built as the worker builds it, called ``warmup_min_calls`` times (lazy initialisation,
    cuDNN's and cuBLAS's first-call work stay outside the range), then once inside
    ``opdb:<key>``. A configuration that cannot be built or run is named in the result; a
    sticky CUDA error ends the probe.

    Raises:
        DeviceUnsupportedError: the device cannot carry NVTX ranges (not CUDA).
        NotFoundError: no such model.
    """
    reason = nvtx.nvtx_unavailable(device)
    if reason is not None:
        raise DeviceUnsupportedError(f"nothing to profile: {reason}")
    result = ProbeResult(model_name)
    with store.transaction(read_only=True) as session:
        model = queries.get_model(session, model_name)
        configs = [
            mc.config for mc in queries.model_configs(session, model.id, measurable_only=True)
        ]
        for config in configs:
            try:
                run = _prepare_operator(config, device, settings).run
                with _grad_mode(config.mode):
                    for _ in range(settings.warmup_min_calls):
                        run()
                    device.synchronize()
                    if nvtx.nvtx_probe(run, nvtx_range_name(config.key), device):
                        result.probed += 1
            except (OperatorDBError, RuntimeError, ValueError, TypeError) as exc:
                if is_sticky_cuda_error(exc):
                    raise
                result.failed[config.key] = str(exc).strip().splitlines()[0] if str(exc) else "?"
    return result
