"""Recognising sticky CUDA errors: the ones after which every CUDA call of the process fails.

A device-side assert, an illegal address or instruction, a launch failure, an uncorrectable ECC
error and their like leave the CUDA context "in an inconsistent state and any further CUDA work
will return the same error. To continue using CUDA, the process must be terminated and
relaunched" (CUDA Runtime API, ``cudaError``). torch 2.13 raises them as ``torch.AcceleratorError``
("CUDA error: device-side assert triggered ..."), older code paths as a plain RuntimeError with the
same text, ``torch.cuda.CudaError`` ("<description> (<code>)") from ``torch.cuda.cudart()`` calls,
and Triton as "Triton Error [CUDA]: <description>". The type alone does not decide:
``AcceleratorError`` also carries errors a process survives (an invalid argument, a failed
``cudaMalloc``). Out of memory is never sticky: the caching allocator frees and the job is retried.
"""

from __future__ import annotations

import torch

from operator_db.errors import DeviceContextLostError

STICKY_CUDA_ERRORS: dict[int, tuple[str, str]] = {
    214: ("cudaErrorECCUncorrectable", "uncorrectable ECC error encountered"),
    220: ("cudaErrorNvlinkUncorrectable", "uncorrectable NVLink error detected"),
    700: ("cudaErrorIllegalAddress", "an illegal memory access was encountered"),
    702: ("cudaErrorLaunchTimeout", "the launch timed out and was terminated"),
    709: ("cudaErrorContextIsDestroyed", "context is destroyed"),
    710: ("cudaErrorAssert", "device-side assert triggered"),
    714: ("cudaErrorHardwareStackError", "hardware stack error"),
    715: ("cudaErrorIllegalInstruction", "an illegal instruction was encountered"),
    716: ("cudaErrorMisalignedAddress", "misaligned address"),
    717: ("cudaErrorInvalidAddressSpace", "operation not supported on global/shared address space"),
    718: ("cudaErrorInvalidPc", "invalid program counter"),
    719: ("cudaErrorLaunchFailure", "unspecified launch failure"),
    999: ("cudaErrorUnknown", "unknown error"),
}
"""The sticky ``cudaError_t`` codes: code → (enum name, ``cudaGetErrorString`` text).

``cudaErrorUnknown`` is not sticky by definition, but it is what a GPU that fell off the bus or
hit an Xid error reports, and a fresh process is the only way to find out whether it recovered.
"""

_DRIVER_NAMES = (
    "CUDA_ERROR_ECC_UNCORRECTABLE",
    "CUDA_ERROR_NVLINK_UNCORRECTABLE",
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_LAUNCH_TIMEOUT",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    "CUDA_ERROR_ASSERT",
    "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    "CUDA_ERROR_INVALID_PC",
    "CUDA_ERROR_LAUNCH_FAILED",
)
"""The driver API's names of the same errors (``CUresult``), as Triton and cuda-python say them."""


def _sticky_text(exc: BaseException) -> bool:
    code = getattr(exc, "error_code", None)
    if isinstance(code, int) and code in STICKY_CUDA_ERRORS:
        return True
    text = str(exc)
    if any(name in text for name, _ in STICKY_CUDA_ERRORS.values()):
        return True
    if any(name in text for name in _DRIVER_NAMES):
        return True
    # The descriptions are plain English ("misaligned address"): only from CUDA they mean this.
    from_cuda = isinstance(exc, torch.cuda.CudaError) or "cuda" in text.lower()
    return from_cuda and any(desc in text for _, desc in STICKY_CUDA_ERRORS.values())


def is_sticky_cuda_error(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception it was raised from, left the CUDA context unusable.

    Walks ``__cause__`` and ``__context__``, so an error wrapped in one of operator-db's own still
    counts; a :class:`DeviceContextLostError` is one by definition. Makes no CUDA call.
    """
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, DeviceContextLostError):
            return True
        if isinstance(current, torch.OutOfMemoryError):
            continue  # "CUDA out of memory": the allocator recovers; never sticky by itself
        if _sticky_text(current):
            return True
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False
