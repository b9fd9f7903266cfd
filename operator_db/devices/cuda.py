"""torch's view of the NVIDIA GPUs: whether it has CUDA, and which GPU its ``cuda:i`` is.

A GPU is chosen by torch's index (``cuda:i``), as a user expects under ``CUDA_VISIBLE_DEVICES``;
NVML numbers the GPUs of the whole host in PCI order, CUDA numbers the visible ones fastest first.
The two meet only through the GPU's UUID.
"""

from __future__ import annotations

import os

import torch

from operator_db.errors import DeviceError, DeviceUnsupportedError


def cuda_unavailable_reason() -> str | None:
    """Say why torch cannot run on an NVIDIA GPU here (a CPU-only build, ...); None if it can."""
    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return (
            f"torch {torch.__version__} is a CPU-only build (no CUDA); "
            "install a CUDA build of torch to measure on an NVIDIA GPU"
        )
    return (
        f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no usable GPU "
        f"(no or too old NVIDIA driver, or no GPU visible{_visible_note()})"
    )


def _visible_note() -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f"; CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""


def cuda_uuid(index: int) -> str:
    """Return the UUID of torch's ``cuda:index`` in NVML's form (``GPU-…``).

    Raises:
        DeviceUnsupportedError: torch has no CUDA here (see ``cuda_unavailable_reason``).
        DeviceError: there is no ``cuda:index``, or torch does not report its UUID.
    """
    reason = cuda_unavailable_reason()
    if reason is not None:
        raise DeviceUnsupportedError(f"an NVIDIA device needs torch with CUDA: {reason}")
    count = torch.cuda.device_count()
    if not 0 <= index < count:
        raise DeviceError(
            f"no CUDA device cuda:{index} (torch sees {count} GPU(s){_visible_note()})"
        )
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    text = str(uuid) if uuid is not None else ""
    if not text:
        raise DeviceError(f"torch does not report the UUID of cuda:{index}; is torch too old?")
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
