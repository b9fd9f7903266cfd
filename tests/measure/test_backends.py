"""torch's backend flags: the settings' defaults are torch's, pinning resets any change, reading
never fails and makes no CUDA call."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import torch
from pydantic import ValidationError

from operator_db.config import MeasureSettings
from operator_db.errors import MeasurementError
from operator_db.measure.backends import PINNED, backends_state, pin_backends, pinned_values
from tests.helpers import REPO


@pytest.fixture(autouse=True)
def _restore_torch() -> Iterator[None]:
    threads = torch.get_num_threads()
    yield
    pin_backends(MeasureSettings(), threads)


def test_the_defaults_are_torchs_own() -> None:
    # A fresh interpreter: nothing of this test session has touched a flag there.
    code = (
        "import json; from operator_db.measure.backends import backends_state; "
        "print(json.dumps(backends_state()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    fresh = json.loads(out)
    assert {k: fresh[k] for k in PINNED} == pinned_values(MeasureSettings())
    assert fresh["float32_matmul_precision"] == "highest"
    assert (fresh["matmul_allow_tf32"], fresh["cudnn_allow_tf32"]) == (False, True)
    assert (fresh["cudnn_benchmark"], fresh["cudnn_deterministic"]) == (False, False)
    assert all(fresh[f"sdp_{n}"] for n in ("flash", "mem_efficient", "math", "cudnn"))


def test_pinning_imports_no_compiler() -> None:
    """Finding: a worker took > 20 s to start on a loaded 2-core host; pinning the flags imported
    TorchInductor and TorchDynamo (``torch.use_deterministic_algorithms`` sets the compiler's
    flag too), 1.5 s of a 4.7 s start on a 2-vCPU VM."""
    code = (
        "import sys; from operator_db.config import MeasureSettings; "
        "from operator_db.measure.backends import pin_backends; pin_backends(MeasureSettings()); "
        "print(sorted(m for m in sys.modules "
        "if m.startswith(('torch._inductor', 'torch._dynamo'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def _disable_sdp() -> None:
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_math_sdp(False)
    torch.backends.cuda.enable_cudnn_sdp(False)


MESSES: dict[str, Callable[[], None]] = {
    "legacy tf32": lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True),
    "precision medium": lambda: torch.set_float32_matmul_precision("medium"),
    "new api tf32": lambda: setattr(torch.backends.cuda.matmul, "fp32_precision", "tf32"),
    "oneDNN bf16": lambda: setattr(torch.backends.mkldnn.matmul, "fp32_precision", "bf16"),
    "cudnn": lambda: torch.backends.cudnn.set_flags(False, True, None, True, False),
    "sdp": _disable_sdp,
    "determinism": lambda: torch.use_deterministic_algorithms(True, warn_only=True),
    "threads": lambda: torch.set_num_threads(1),
}


@pytest.mark.parametrize("mess", list(MESSES), ids=list(MESSES))
def test_pinning_undoes_what_model_code_set(mess: str) -> None:
    settings = MeasureSettings()
    threads = torch.get_num_threads() + 1
    pinned = pin_backends(settings, threads)
    MESSES[mess]()
    assert backends_state() != pinned
    again = pin_backends(settings, threads)
    assert again == pinned
    assert {k: again[k] for k in (*PINNED, "threads")} == pinned_values(settings, threads)


def test_mixed_tf32_apis_read_as_a_string_and_pin_back() -> None:
    torch.set_float32_matmul_precision("medium")
    torch.backends.cuda.matmul.allow_tf32 = False  # legacy on top of new: torch refuses to read
    with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
        torch.get_float32_matmul_precision()
    state = backends_state()
    assert str(state["float32_matmul_precision"]).startswith("unreadable: ")
    json.dumps(state)  # JSON-ready even then
    assert pin_backends(MeasureSettings())["float32_matmul_precision"] == "highest"


def test_other_values_are_pinned_too() -> None:
    settings = MeasureSettings(
        matmul_allow_tf32=True,
        float32_matmul_precision="high",
        cudnn_benchmark=True,
        cudnn_deterministic=True,
        sdp_flash=False,
        deterministic_algorithms=True,
    )
    state = pin_backends(settings, 1)
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.benchmark
    assert not torch.backends.cuda.flash_sdp_enabled()
    assert torch.are_deterministic_algorithms_enabled() and torch.get_num_threads() == 1
    assert {k: state[k] for k in (*PINNED, "threads")} == pinned_values(settings, 1)


def test_contradicting_tf32_settings_are_refused() -> None:
    with pytest.raises(ValidationError, match="contradicts float32_matmul_precision"):
        MeasureSettings(matmul_allow_tf32=True)
    with pytest.raises(ValidationError, match="contradicts"):
        MeasureSettings(float32_matmul_precision="high")


def test_a_flag_torch_does_not_take_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.use_deterministic_algorithms(True)
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda *a, **k: None)
    with pytest.raises(MeasurementError, match="deterministic_algorithms is True, not False"):
        pin_backends(MeasureSettings())
    monkeypatch.undo()


def test_no_cuda_call(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    for name in ("synchronize", "empty_cache", "is_available", "init", "current_device"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name, **k: calls.append(_n))
    pin_backends(MeasureSettings())
    backends_state()
    assert calls == []
