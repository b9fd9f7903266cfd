"""NVML access: a lazy ``pynvml`` import, one table translating its errors, ``nvml_available()``."""

from __future__ import annotations

import contextlib
import importlib
from contextlib import ContextDecorator
from types import ModuleType, TracebackType
from typing import Any

from operator_db.errors import (
    DeviceError,
    DeviceUnsupportedError,
    OperatorDBError,
    PermissionDeniedError,
)

# NVMLError.value -> (constant name, project error, what it means). The codes are NVML's ABI
# (nvml.h, nvmlReturn_t); a test checks them against pynvml's constants.
NVML_ERROR_TABLE: dict[int, tuple[str, type[OperatorDBError], str]] = {
    1: ("NVML_ERROR_UNINITIALIZED", DeviceError, "NVML is not initialised (device closed?)"),
    2: ("NVML_ERROR_INVALID_ARGUMENT", DeviceError, "invalid argument"),
    3: ("NVML_ERROR_NOT_SUPPORTED", DeviceUnsupportedError, "not supported by this GPU or driver"),
    4: ("NVML_ERROR_NO_PERMISSION", PermissionDeniedError, "insufficient permissions"),
    6: ("NVML_ERROR_NOT_FOUND", DeviceError, "not found"),
    9: ("NVML_ERROR_DRIVER_NOT_LOADED", DeviceUnsupportedError, "the NVIDIA driver is not loaded"),
    10: ("NVML_ERROR_TIMEOUT", DeviceError, "timed out"),
    11: ("NVML_ERROR_IRQ_ISSUE", DeviceError, "interrupt request issue"),
    12: (
        "NVML_ERROR_LIBRARY_NOT_FOUND",
        DeviceUnsupportedError,
        "the NVML library (libnvidia-ml.so.1) was not found; is the NVIDIA driver installed?",
    ),
    13: (
        "NVML_ERROR_FUNCTION_NOT_FOUND",
        DeviceUnsupportedError,
        "the installed driver lacks this NVML function (driver too old)",
    ),
    14: ("NVML_ERROR_CORRUPTED_INFOROM", DeviceError, "the GPU's infoROM is corrupted"),
    15: ("NVML_ERROR_GPU_IS_LOST", DeviceError, "the GPU is lost (fell off the bus); reset it"),
    16: ("NVML_ERROR_RESET_REQUIRED", DeviceError, "the GPU needs a reset"),
    17: ("NVML_ERROR_OPERATING_SYSTEM", DeviceError, "the operating system blocked the request"),
    18: (
        "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        DeviceUnsupportedError,
        "NVML and the kernel driver differ in version; reload the driver or reboot",
    ),
    19: ("NVML_ERROR_IN_USE", DeviceError, "the GPU is in use"),
    20: ("NVML_ERROR_MEMORY", DeviceError, "insufficient memory"),
    21: ("NVML_ERROR_NO_DATA", DeviceError, "no data"),
    25: (
        "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
        DeviceUnsupportedError,
        "the driver does not support this version of the call (driver too old)",
    ),
    26: (
        "NVML_ERROR_DEPRECATED",
        DeviceUnsupportedError,
        "the driver no longer supports this call",
    ),
    27: ("NVML_ERROR_NOT_READY", DeviceError, "not ready"),
    28: ("NVML_ERROR_GPU_NOT_FOUND", DeviceError, "GPU not found"),
    999: ("NVML_ERROR_UNKNOWN", DeviceError, "unknown NVML error"),
}

NVML_GPU_GONE: frozenset[int] = frozenset({9, 15, 16, 18, 28})
"""Codes after which this GPU cannot be read at all: driver not loaded, GPU lost, reset required,
library/driver mismatch, GPU not found. Any other failure loses only the reading that hit it."""


def nvml_error_code(exc: BaseException) -> int | None:
    """Return the NVML return code behind ``exc``, or None.

    ``exc`` is an NVMLError, or a project error that ``nvml_errors`` translated from one.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if is_nvml_error(seen):
            return int(seen.value)  # type: ignore[attr-defined]
        seen = seen.__cause__
    return None


def gpu_gone(exc: BaseException) -> bool:
    """Return whether ``exc`` says the GPU (or its driver) is gone, per ``NVML_GPU_GONE``."""
    return nvml_error_code(exc) in NVML_GPU_GONE


def is_nvml_error(exc: BaseException) -> bool:
    """Return whether ``exc`` is a ``pynvml.NVMLError`` (by class name: pynvml may be absent)."""
    return any(cls.__name__ == "NVMLError" for cls in type(exc).__mro__) and isinstance(
        getattr(exc, "value", None), int
    )


def translate_nvml_error(exc: BaseException, action: str) -> OperatorDBError:
    """Return the project error for an NVML error raised while trying to ``action``.

    The message is one line: ``NVML could not <action>: <meaning> (<NVML_ERROR_...>)``.
    """
    code: int = getattr(exc, "value", -1)
    return nvml_code_error(code, action, detail=_safe_str(exc))


def nvml_code_error(code: int, action: str, *, detail: str = "") -> OperatorDBError:
    """Return the project error for NVML return ``code`` met while trying to ``action``.

    For codes that come back without an exception, e.g. a field value's ``nvmlReturn``.
    """
    name, cls, meaning = NVML_ERROR_TABLE.get(
        code, (f"NVML error {code}", DeviceError, detail or "unknown")
    )
    return cls(f"NVML could not {action}: {meaning} ({name})")


def _safe_str(exc: BaseException) -> str:
    try:
        return " ".join(str(exc).split()) or type(exc).__name__
    except Exception:  # noqa: BLE001 - pynvml's __str__ may call into a missing library
        return type(exc).__name__


class nvml_errors(ContextDecorator):  # noqa: N801 - used like a function: ``with nvml_errors(...)``
    """Translate NVML errors raised inside the block (or decorated function) to project errors.

    Raises:
        DeviceUnsupportedError, PermissionDeniedError, DeviceError: per ``NVML_ERROR_TABLE``.
    """

    def __init__(self, action: str) -> None:
        self.action = action

    def __enter__(self) -> nvml_errors:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and is_nvml_error(exc):
            raise translate_nvml_error(exc, self.action) from exc


def import_pynvml() -> ModuleType:
    """Import nvidia-ml-py's ``pynvml`` on first use.

    Raises:
        DeviceUnsupportedError: ``NVML unavailable: nvidia-ml-py is not installed ...``.
    """
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise DeviceUnsupportedError(
            "NVML unavailable: nvidia-ml-py is not installed (pip install 'operator-db[gpu]')"
        ) from exc


def nvml_available(nvml: Any = None) -> tuple[bool, str]:
    """Say whether NVML works here and sees a GPU; never raises.

    Returns ``(True, "<n> NVIDIA GPU(s), driver <version>")`` or
    ``(False, "NVML unavailable: <reason>")``. ``nvml`` replaces the ``pynvml`` module (tests).
    """
    try:
        module = nvml if nvml is not None else import_pynvml()
    except DeviceUnsupportedError as exc:
        return False, str(exc)
    try:
        with nvml_errors("initialise"):
            module.nvmlInit()
    except OperatorDBError as exc:
        return False, f"NVML unavailable: {exc}"
    except Exception as exc:  # noqa: BLE001 - a broken binding must not crash a CPU-only host
        return False, f"NVML unavailable: {type(exc).__name__}: {_safe_str(exc)}"
    try:
        with nvml_errors("count GPUs"):
            count = int(module.nvmlDeviceGetCount())
        driver = _optional_str(module, "nvmlSystemGetDriverVersion")
    except OperatorDBError as exc:
        return False, f"NVML unavailable: {exc}"
    except Exception as exc:  # noqa: BLE001 - as above
        return False, f"NVML unavailable: {type(exc).__name__}: {_safe_str(exc)}"
    finally:
        with contextlib.suppress(Exception):  # shutting down after a failure; nothing to add
            module.nvmlShutdown()
    if count == 0:
        return False, "NVML unavailable: NVML works but sees no NVIDIA GPU"
    return True, f"{count} NVIDIA GPU(s), driver {driver or 'unknown'}"


def _optional_str(module: Any, function: str, *args: Any) -> str | None:
    """Call ``module.function(*args)`` and return its text, or None where unsupported."""
    try:
        with nvml_errors(f"call {function}"):
            value = getattr(module, function)(*args)
    except DeviceUnsupportedError:
        return None
    return as_text(value)


def as_text(value: Any) -> str:
    """Return NVML text as str (old bindings return bytes)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
