"""``opdb doctor`` on a real NVIDIA GPU (``pytest -m gpu tests/doctor -s`` prints the table).

Skipped where NVML, a GPU or torch's CUDA is absent (a failure with ``OPDB_REQUIRE_GPU=1``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from operator_db.config import Settings
from operator_db.doctor import DoctorOptions, run_doctor
from tests.helpers import require_gpu

pytestmark = pytest.mark.gpu


def test_doctor_on_this_gpu(tmp_path: Path) -> None:
    require_gpu()
    report = run_doctor(
        Settings(),
        device="nvidia:0",
        db_url=f"sqlite:///{tmp_path / 'none.sqlite'}",
        options=DoctorOptions(window_s=2.0),
    )
    for check in report.checks:
        print(f"{check.name:18} {check.status:4}  {check.value}  {check.action}")
    rows = {c.name: c for c in report.checks}
    assert rows["nvml"].status == rows["torch"].status == rows["gpu_map"].status == "ok"
    assert rows["device"].status == "ok"
    assert rows["device"].data["device_id"].startswith("GPU-")
    for name in ("agreement_idle", "agreement_load"):  # Volta or newer with field 186
        if name in rows:
            assert rows[name].status == "ok", rows[name]
    assert report.elapsed_s < 60
    assert report.exit_code == 0, report.failed
