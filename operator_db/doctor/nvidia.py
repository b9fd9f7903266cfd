"""NVIDIA checks: NVML, torch's CUDA, the GPU map, identity, power limit, clocks.

NVML; torch's CUDA build; which GPU torch's ``cuda:i`` is in NVML; the GPU's identity; its power
limit; whether clocks could be locked; its clock-event reasons now.

Everything here reads; nothing changes the GPU (no clocks set, no limits written).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch

from operator_db.devices.base import Device
from operator_db.devices.cuda import cuda_unavailable_reason, cuda_uuid
from operator_db.devices.nvidia import NvidiaDevice
from operator_db.devices.nvml import as_text, import_pynvml, nvml_available, nvml_errors
from operator_db.doctor.report import Check, fail, ok, one_line, warn
from operator_db.errors import OperatorDBError

INSTALL_NVML = (
    "install the NVIDIA driver (nvidia-smi must work) and nvidia-ml-py "
    "(pip install 'operator-db[gpu]')"
)
INSTALL_TORCH = (
    "install a CUDA build of torch that this driver supports "
    "(pip install torch --index-url https://download.pytorch.org/whl/cu12X), or measure on the "
    "CPU with --device cpu"
)


def nvml_check(nvml: Any, *, required: bool) -> tuple[Check, bool]:
    """Say whether NVML works and sees a GPU; return the check and whether it does.

    fail when ``required`` (the device is ``nvidia``); else a host without NVML is a CPU host (ok).
    """
    works, says = nvml_available(nvml)
    if works:
        return ok("nvml", "NVML", says), True
    if required:
        return fail("nvml", "NVML", says, INSTALL_NVML), False
    return ok("nvml", "NVML", f"{says}; not an NVIDIA host: measuring on the CPU"), False


def torch_check(*, nvidia_host: bool) -> Check:
    """Say torch's version, CUDA build and cuDNN, and whether it sees a GPU.

    fail on an NVIDIA host where torch has no CUDA (a CPU-only build, a driver too old, no GPU
    visible): a worker there would measure the CPU, or nothing.
    """
    cudnn = (
        torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
        if torch.backends.cudnn.is_available()  # type: ignore[no-untyped-call]
        else None
    )
    build = torch.version.cuda
    cuda = build or "none (CPU-only build)"
    value = f"torch {torch.__version__}, CUDA {cuda}, cuDNN {cudnn or 'none'}"
    data: dict[str, Any] = {"torch": torch.__version__, "cuda": build, "cudnn": cudnn}
    if not nvidia_host:
        return ok("torch", "torch", value, **data)
    reason = cuda_unavailable_reason()
    if reason is not None:
        return fail("torch", "torch", f"{value}; {reason}", INSTALL_TORCH, **data)
    count = torch.cuda.device_count()
    return ok("torch", "torch", f"{value}; sees {count} GPU(s)", gpus=count, **data)


def gpu_map_check(nvml: Any) -> Check:
    """Find each of torch's GPUs in NVML by UUID and say which NVML index it is.

    fail: a ``cuda:i`` that NVML does not have (a MIG instance, or a container whose NVML sees
    other GPUs): its energy could not be read, or would be another GPU's. Names that differ are
    a warning. CUDA's order differing from NVML's is normal and only reported.
    """
    module = nvml if nvml is not None else import_pynvml()
    mapping: list[dict[str, Any]] = []
    problems: list[str] = []
    notes: list[str] = []
    with nvml_errors("initialise"):
        module.nvmlInit()
    try:
        for i in range(torch.cuda.device_count()):
            try:
                uuid = cuda_uuid(i)
            except OperatorDBError as exc:
                problems.append(f"cuda:{i}: {one_line(exc)}")
                continue
            torch_name = str(torch.cuda.get_device_properties(i).name)
            try:
                with nvml_errors(f"find cuda:{i} by its UUID"):
                    handle = module.nvmlDeviceGetHandleByUUID(uuid)
                    index = int(module.nvmlDeviceGetIndex(handle))
                    name = as_text(module.nvmlDeviceGetName(handle))
            except OperatorDBError as exc:
                mig = (
                    " (a MIG instance: energy is per physical GPU)"
                    if uuid.startswith("MIG-")
                    else ""
                )
                problems.append(f"cuda:{i} ({uuid}): no NVML GPU has it{mig}: {one_line(exc)}")
                continue
            mapping.append({"cuda_index": i, "nvml_index": index, "uuid": uuid, "name": name})
            if name != torch_name:
                notes.append(f"cuda:{i} is {torch_name!r} to torch but {name!r} to NVML")
    finally:
        with contextlib.suppress(Exception):  # shutting down; nothing to add
            module.nvmlShutdown()
    value = ", ".join(
        f"cuda:{m['cuda_index']} = NVML {m['nvml_index']} ({m['uuid']})" for m in mapping
    )
    data = {
        "mapping": mapping,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"),
    }
    title = "torch ↔ NVML"
    if problems:
        return fail(
            "gpu_map",
            title,
            "; ".join(filter(None, [value, *problems])),
            "measure on a whole GPU that NVML sees (not a MIG instance); check "
            "CUDA_VISIBLE_DEVICES and that the container's driver and NVML match",
            **data,
        )
    if notes:
        return warn("gpu_map", title, f"{value}; {'; '.join(notes)}", "check the driver", **data)
    if not mapping:
        return fail("gpu_map", title, "torch sees no GPU", INSTALL_TORCH, **data)
    return ok("gpu_map", title, value, **data)


def gpu_check(device: NvidiaDevice) -> Check:
    """Say which GPU is measured: name, architecture, UUID, indices, driver, memory."""
    ident = device.identity()
    extra = ident.extra
    memory = f", {ident.memory_bytes / 1024**3:.0f} GiB" if ident.memory_bytes else ""
    value = (
        f"{ident.name} ({ident.architecture or 'unknown architecture'}{memory}), "
        f"{ident.device_id}, cuda:{extra.get('cuda_index')} = NVML {extra.get('nvml_index')}, "
        f"driver {ident.driver_version} (CUDA {extra.get('cuda_driver_version')}), "
        f"NVML {ident.nvml_version}"
    )
    return ok("device", "GPU", value, **ident.as_dict())


def power_limit_check(device: NvidiaDevice) -> Check:
    """Say the enforced power limit; warn when it is below the board's default (a capped GPU)."""
    limits = device.nvml_gpu.power_limits_w()
    enforced, default = limits["enforced_w"], limits["default_w"]
    if enforced is None:
        return ok("power_limit", "power limit", "not readable on this GPU", **limits)
    if default is not None and enforced < default - 0.5:
        return warn(
            "power_limit",
            "power limit",
            f"{enforced:g} W, below the board's default {default:g} W",
            f"results hold for this cap only: restore it (sudo nvidia-smi -pl {default:g}) or "
            "keep it for every measurement of this kind",
            **limits,
        )
    note = " (the default)" if default is not None else ""
    return ok("power_limit", "power limit", f"{enforced:g} W{note}", **limits)


def clock_lock_check(device: NvidiaDevice, euid: int) -> Check:
    """Say whether locking clocks would be allowed, reading only (nothing is set).

    ``nvmlDeviceSetGpuLockedClocks`` needs root; NVML has no read-only way to ask whether a call
    would succeed, so a root process gets "unknown". Always ok: operator-db does not lock clocks
    (optional, METHODOLOGY §1).
    """
    restricted = device.nvml_gpu.application_clocks_restricted()
    apps = {True: "root only", False: "any user", None: "unknown"}[restricted]
    if euid != 0:
        allowed: bool | None = False
        value = f"not allowed: locking clocks needs root; this process runs as uid {euid}"
    else:
        allowed = None
        value = (
            "unknown (needs root): this process is root, but NVML has no read-only probe "
            "and trying would change the clocks (a container may still be refused)"
        )
    return ok(
        "clock_lock",
        "clock locking",
        f"{value}; setting application clocks: {apps}",
        "none needed: operator-db measures at the clocks the GPU chooses and records them",
        allowed=allowed,
        euid=euid,
        application_clocks_restricted=restricted,
    )


def clock_events_check(device: Device) -> Check:
    """Say the clocks, temperature and clock-event reasons now, decoded.

    warn: HW slowdown, thermal slowdown or power brake while idle (trials would be flagged
    ``throttled``). A power cap or an idle GPU is normal.
    """
    t = device.telemetry()
    if t.clock_event_reasons is None:
        return ok("clock_events", "clock events", "not readable on this device", **t.as_dict())
    reasons = ", ".join(t.clock_event_flags) or "none"
    temperature = f", {t.temperature_c:g} °C" if t.temperature_c is not None else ""
    value = (
        f"SM {t.sm_clock_mhz} MHz, memory {t.mem_clock_mhz} MHz{temperature}; "
        f"reasons {t.clock_event_reasons:#x}: {reasons}"
    )
    if t.throttled:
        return warn(
            "clock_events",
            "clock events",
            value,
            "the device slows down while idle: check its cooling and power supply; energy "
            "trials would be flagged throttled",
            **t.as_dict(),
        )
    return ok("clock_events", "clock events", value, **t.as_dict())
