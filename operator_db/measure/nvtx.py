"""One call of a configuration inside an NVTX range, for Nsight Compute to profile (docs/ncu.md).

With ``OPDB_MEASURE__NVTX`` on a CUDA device, the engine runs one extra call of each configuration
after its warm-up, outside the timed blocks, between ``torch.cuda.nvtx.range_push(name)`` and
``range_pop()``; ``ncu --nvtx --nvtx-include`` then profiles that call's kernels and no other.
The range's name is :func:`operator_db.specs.keys.nvtx_range_name` of the configuration's key.
"""

from __future__ import annotations

import logging

import torch

from operator_db.devices.base import Device
from operator_db.measure.timing import Call

logger = logging.getLogger(__name__)

_said: set[str] = set()
"""Reasons already logged in this process: each is said once, not once per configuration."""


def nvtx_unavailable(device: Device) -> str | None:
    """Say why no NVTX range can be pushed around calls on ``device``; None where one can."""
    kind = device.torch_device().type
    if kind != "cuda":
        return f"NVTX ranges are for CUDA devices; this one runs on {kind}"
    if not hasattr(torch.cuda, "nvtx"):
        return "this torch has no torch.cuda.nvtx"
    return None


def _say_once(reason: str) -> None:
    if reason not in _said:
        _said.add(reason)
        logger.warning("OPDB_MEASURE__NVTX is on but does nothing: %s", reason)


def nvtx_probe(run: Call, name: str, device: Device) -> bool:
    """Run ``run`` once inside an NVTX range ``name``; return whether the range was pushed.

    The device is synchronised before the range is popped, so that the range also spans the
    call's GPU work in a timeline (Nsight Systems); Nsight Compute attributes a kernel to the
    ranges open when it was launched. Where no range can be pushed (:func:`nvtx_unavailable`, or
    a torch built without NVTX) nothing runs, and the reason is logged once per process.
    """
    reason = nvtx_unavailable(device)
    if reason is not None:
        _say_once(reason)
        return False
    try:
        torch.cuda.nvtx.range_push(name)  # type: ignore[no-untyped-call]
    except RuntimeError as exc:  # torch's stub without NVTX: "NVTX functions not installed"
        _say_once(str(exc).splitlines()[0] if str(exc) else "torch.cuda.nvtx failed")
        return False
    try:
        run()
        device.synchronize()
    finally:
        torch.cuda.nvtx.range_pop()  # type: ignore[no-untyped-call]
    return True
