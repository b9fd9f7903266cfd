"""torch's process-wide backend flags: pin them to the settings' values, and read them back.

TF32, the float32 matmul precision, cuDNN's benchmark and deterministic modes, the
scaled-dot-product-attention kernels, deterministic algorithms and the CPU thread count change
which kernels run and how fast. They are process-wide and any model code may set them (e.g.
``transformers.enable_full_determinism``), so a job could otherwise change the measurements of
every job after it. The worker pins them at start and before each job (:func:`pin_backends`),
and stores the state a job ran under (:func:`backends_state`) in each result's provenance.

Since torch 2.9 two APIs hold the TF32 state: the legacy flags (``allow_tf32``,
``set_float32_matmul_precision``) and the per-backend ``fp32_precision`` strings. Mixing them can
leave a state that the legacy getters refuse to read (a RuntimeError); pinning resets every
``fp32_precision`` to ``"none"`` (inherit) first, so the legacy settings decide alone.

Every flag here lives in the process, not on the device: setting or reading one makes no CUDA
call, and all of it works on a CPU-only build of torch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from operator_db.config import MeasureSettings
from operator_db.errors import MeasurementError

_FP32_PRECISION_HOLDERS = (
    "",
    "cuda.matmul",
    "cudnn",
    "cudnn.conv",
    "cudnn.rnn",
    "mkldnn",
    "mkldnn.matmul",
    "mkldnn.conv",
    "mkldnn.rnn",
)
"""Where torch (>= 2.9) keeps an ``fp32_precision`` under ``torch.backends``, parents first."""

PINNED = (
    "matmul_allow_tf32",
    "float32_matmul_precision",
    "cudnn_allow_tf32",
    "cudnn_enabled",
    "cudnn_benchmark",
    "cudnn_deterministic",
    "sdp_flash",
    "sdp_mem_efficient",
    "sdp_math",
    "sdp_cudnn",
    "deterministic_algorithms",
)
"""The settings (``MeasureSettings`` fields) that :func:`pin_backends` applies, by name."""


def _holder(path: str) -> Any:
    """Return the ``torch.backends`` object at ``path`` ("" is ``torch.backends``), or None."""
    obj: Any = torch.backends
    for part in filter(None, path.split(".")):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _sdp(name: str) -> Callable[[], bool] | None:
    return getattr(torch.backends.cuda, f"{name}_sdp_enabled", None)


def _readers() -> dict[str, Callable[[], object]]:
    """Return a getter per pinned flag (a flag this torch lacks is left out)."""
    cuda, cudnn = torch.backends.cuda, torch.backends.cudnn
    readers: dict[str, Callable[[], object]] = {
        "matmul_allow_tf32": lambda: cuda.matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision,
        "cudnn_allow_tf32": lambda: cudnn.allow_tf32,
        "cudnn_enabled": lambda: cudnn.enabled,
        "cudnn_benchmark": lambda: cudnn.benchmark,
        "cudnn_deterministic": lambda: cudnn.deterministic,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
    }
    for name in ("flash", "mem_efficient", "math", "cudnn"):
        getter = _sdp(name)
        if getter is not None:
            readers[f"sdp_{name}"] = getter
    return readers


def _read(getter: Callable[[], object]) -> object:
    """Call a getter; a state torch refuses to read (mixed TF32 APIs) becomes its error's text."""
    try:
        value = getter()
    except RuntimeError as exc:
        text = str(exc).strip()
        return f"unreadable: {text.splitlines()[0] if text else type(exc).__name__}"
    return value if isinstance(value, bool | int | float | str) or value is None else str(value)


def backends_state() -> dict[str, Any]:
    """Return torch's backend flags now, JSON-ready, keyed like the ``MeasureSettings`` fields.

    Holds every flag in :data:`PINNED` that this torch has (``sdp_cudnn`` is None where it has
    none), ``threads`` (``torch.get_num_threads()``) and ``fp32_precision``, the per-backend
    strings of torch >= 2.9 (empty before), keyed by their place under ``torch.backends``
    (``generic`` for ``torch.backends`` itself). A flag torch cannot read is a string
    ``"unreadable: <torch's message>"``. Makes no CUDA call.
    """
    readers = _readers()
    state: dict[str, Any] = {
        name: _read(readers[name]) if name in readers else None for name in PINNED
    }
    state["threads"] = torch.get_num_threads()
    precisions: dict[str, object] = {}
    for path in _FP32_PRECISION_HOLDERS:
        holder = _holder(path)
        if holder is not None and hasattr(holder, "fp32_precision"):
            precisions[path or "generic"] = _read(partial(getattr, holder, "fp32_precision"))
    state["fp32_precision"] = precisions
    return state


def pinned_values(settings: MeasureSettings, threads: int | None = None) -> dict[str, Any]:
    """Return the values :func:`pin_backends` sets, keyed like :func:`backends_state`."""
    wanted: dict[str, Any] = {name: getattr(settings, name) for name in PINNED}
    if threads is not None:
        wanted["threads"] = threads
    return wanted


def pin_backends(settings: MeasureSettings, threads: int | None = None) -> dict[str, Any]:
    """Set torch's backend flags to ``settings`` and ``threads`` CPU threads; return the state.

    ``threads`` None leaves the thread count as it is. A flag this torch lacks (``sdp_cudnn``
    before 2.2) is skipped. Makes no CUDA call.

    Raises:
        MeasurementError: a flag does not read back as set (torch refused it).
    """
    for path in _FP32_PRECISION_HOLDERS:
        holder = _holder(path)
        if holder is not None and hasattr(holder, "fp32_precision"):
            holder.fp32_precision = "none"
    # The matmul precision also sets cuda.matmul.allow_tf32 ("highest" off, else on): the
    # settings are checked to agree, and setting allow_tf32 on top would mix torch's two states.
    torch.set_float32_matmul_precision(settings.float32_matmul_precision)
    cudnn = torch.backends.cudnn
    cudnn.allow_tf32 = settings.cudnn_allow_tf32
    cudnn.enabled = settings.cudnn_enabled
    cudnn.benchmark = settings.cudnn_benchmark
    cudnn.deterministic = settings.cudnn_deterministic
    for name in ("flash", "mem_efficient", "math", "cudnn"):
        enable = getattr(torch.backends.cuda, f"enable_{name}_sdp", None)
        if enable is not None and _sdp(name) is not None:
            enable(getattr(settings, f"sdp_{name}"))
    _use_deterministic_algorithms(settings.deterministic_algorithms)
    if threads is not None:
        torch.set_num_threads(threads)
    state = backends_state()
    wrong = {
        name: (value, state[name])
        for name, value in pinned_values(settings, threads).items()
        if state[name] is not None and state[name] != value
    }
    if wrong:
        detail = ", ".join(f"{n} is {got!r}, not {want!r}" for n, (want, got) in wrong.items())
        raise MeasurementError(f"torch did not take the pinned backend flags: {detail}")
    return state


def _use_deterministic_algorithms(mode: bool) -> None:
    """``torch.use_deterministic_algorithms(mode)``, skipped where it would change nothing.

    torch's call also sets ``torch._inductor.config.deterministic``, importing TorchInductor and
    TorchDynamo to do so: 1.5 s of a worker's 4.7 s start on a 2-vCPU VM, for a compiler the
    measurements never use. Off, as torch starts, with TorchInductor not loaded, there is nothing
    to set (its own default is off too); on, or with TorchInductor loaded, torch's call is made.
    """
    if (
        not mode
        and not torch.are_deterministic_algorithms_enabled()
        and not torch.is_deterministic_algorithms_warn_only_enabled()
        and "torch._inductor.config" not in sys.modules
        and os.environ.get("TORCHINDUCTOR_DETERMINISTIC") != "1"  # its default, once loaded
    ):
        return
    torch.use_deterministic_algorithms(mode)
