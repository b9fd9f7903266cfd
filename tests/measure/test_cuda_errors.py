"""Which errors leave the CUDA context unusable (sticky) and which a process survives."""

from __future__ import annotations

import pytest
import torch

from operator_db.errors import DeviceContextLostError, MeasurementError
from operator_db.measure.cuda_errors import STICKY_CUDA_ERRORS, is_sticky_cuda_error

ASYNC_NOTE = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"
    "\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


def cuda_error(text: str) -> torch.cuda.CudaError:
    """A ``torch.cuda.CudaError`` as ``torch.cuda.cudart()`` raises it (its __init__ needs CUDA)."""
    exc = torch.cuda.CudaError.__new__(torch.cuda.CudaError)
    RuntimeError.__init__(exc, text)
    return exc


def with_code(code: int) -> BaseException:
    exc = torch.AcceleratorError("CUDA error: (message lost)")
    exc.error_code = code  # type: ignore[attr-defined]
    return exc


STICKY: dict[str, BaseException] = {
    "AcceleratorError assert": torch.AcceleratorError(
        "CUDA error: device-side assert triggered\nSearch for `cudaErrorAssert' in "
        "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html" + ASYNC_NOTE
    ),
    "RuntimeError illegal address": RuntimeError(
        "CUDA error: an illegal memory access was encountered" + ASYNC_NOTE
    ),
    "illegal instruction": RuntimeError("CUDA error: an illegal instruction was encountered"),
    "launch failure": torch.AcceleratorError("CUDA error: unspecified launch failure"),
    "misaligned": RuntimeError("CUDA error: misaligned address"),
    "ECC": RuntimeError("CUDA error: uncorrectable ECC error encountered"),
    "unknown (Xid)": RuntimeError("CUDA error: unknown error"),
    "CudaError": cuda_error("device-side assert triggered (710)"),
    "Triton": RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered"),
    "driver API name": RuntimeError("CUDA_ERROR_LAUNCH_FAILED: kernel launch failed"),
    "error_code attribute": with_code(700),
    "ours, lost": DeviceContextLostError("GPU lost"),
}

SURVIVABLE: dict[str, BaseException] = {
    "OutOfMemoryError": torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.1 GiB"
    ),
    "cudaMalloc failed": torch.AcceleratorError("CUDA error: out of memory" + ASYNC_NOTE),
    "invalid argument": torch.AcceleratorError("CUDA error: invalid argument"),
    "invalid configuration": RuntimeError("CUDA error: invalid configuration argument"),
    "not CUDA: misaligned": ValueError("misaligned address in the buffer protocol"),
    "not CUDA: unknown": RuntimeError("unknown error"),
    "CPU shape error": RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x16 and 8x32)"),
    "cuBLAS": RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx(...)`"),
    "error_code not sticky": with_code(1),
}


@pytest.mark.parametrize("name", list(STICKY))
def test_sticky(name: str) -> None:
    assert is_sticky_cuda_error(STICKY[name])


@pytest.mark.parametrize("name", list(SURVIVABLE))
def test_survivable(name: str) -> None:
    assert not is_sticky_cuda_error(SURVIVABLE[name])


def test_a_wrapped_sticky_error_is_sticky() -> None:
    def capture() -> None:
        try:
            raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered")
        except RuntimeError as exc:
            raise MeasurementError("CUDA graph capture failed") from exc

    with pytest.raises(MeasurementError) as info:
        capture()
    assert is_sticky_cuda_error(info.value)
    assert not is_sticky_cuda_error(MeasurementError("CUDA graph capture failed"))


def test_an_error_raised_while_handling_one_is_sticky() -> None:
    try:
        try:
            raise RuntimeError("CUDA error: device-side assert triggered")
        except RuntimeError:
            raise TypeError("cleanup failed") from None
    except TypeError as exc:
        # ``from None`` hides the context from tracebacks, not from __context__: still sticky.
        assert is_sticky_cuda_error(exc)


def test_every_sticky_code_has_a_name_and_a_text() -> None:
    assert {710, 700, 715, 719, 214}.issubset(STICKY_CUDA_ERRORS)
    for code, (name, text) in STICKY_CUDA_ERRORS.items():
        assert name.startswith("cudaError") and text
        assert is_sticky_cuda_error(RuntimeError(f"CUDA error: {text}")), code
        assert is_sticky_cuda_error(with_code(code))
