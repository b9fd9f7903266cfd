"""``opdb ncu command``, ``opdb ncu probe`` and ``opdb ncu import``."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import torch
from sqlalchemy import select

from operator_db.db.models import NcuCounter, OperatorConfig
from operator_db.db.store import Store
from operator_db.measure import nvtx
from operator_db.specs.keys import nvtx_range_name
from tests.helpers import run_cli
from tests.roofline.test_ncu import FIXTURE, GPU, ingest_toy

METRICS = (
    "gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,"
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum,"
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum,"
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,"
    "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum,"
    "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum,"
    "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum,"
    "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum,"
    "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum,"
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum,"
    "sm__inst_executed_pipe_tensor.sum,device__attribute_display_name"
)


def test_command_prints_the_ncu_line_and_what_to_do_next(
    store: Store, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ingest_toy(store)
    result = run_cli(capsys, "ncu", "command", "toy", "--db", db_url, "--device-kind", GPU)
    assert result.code == 0, result.err
    assert shlex.split(result.out) == [
        "ncu",
        "--nvtx",
        "--nvtx-include",
        "regex:opdb:[0-9a-f]{64}/",
        "--print-nvtx-rename",
        "kernel",
        "--metrics",
        METRICS,
        "--cache-control",
        "all",
        "--clock-control",
        "base",
        "--target-processes",
        "all",
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--log-file",
        "ncu-toy.csv",
        "opdb",
        "ncu",
        "probe",
        "toy",
        "--device",
        "nvidia",
        "--db",
        db_url,
    ]
    assert result.out.count("\n") == 1  # one line, never wrapped
    assert result.err == (
        "# profiles one call of each of the 2 measurable configurations of toy; then: "
        f"opdb ncu import ncu-toy.csv --device-kind '{GPU}'\n"
    )


def test_command_for_an_unknown_model_is_one_line(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(capsys, "ncu", "command", "nope", "--db", db_url)
    assert result.code == 1 and result.out == ""
    assert result.err.startswith("error: ") and result.err.count("\n") == 1


def test_import_prints_one_summary_line(
    store: Store, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ingest_toy(store)
    result = run_cli(capsys, "ncu", "import", str(FIXTURE), "--db", db_url)
    assert result.code == 0, result.err
    first = f"ncu_raw.csv: 7 kernels; counters of 2 configurations on {GPU} stored; "
    assert result.out.startswith(first)
    assert result.out.count("\n") == 1
    with store.transaction(read_only=True) as session:
        assert len(session.scalars(select(NcuCounter)).all()) == 2


def test_import_of_a_bad_file_is_one_line_and_stores_nothing(
    store: Store, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ingest_toy(store)
    bad = tmp_path / "notes.csv"
    bad.write_text("model,latency\nresnet,3\n")
    binary = tmp_path / "report.ncu-rep"
    binary.write_bytes(b"\xff\xfe\x00binary")
    for path, message in (
        (bad, "error: notes.csv: not an Nsight Compute raw CSV"),
        (binary, f"error: {binary}: not UTF-8 text"),
        (tmp_path / "missing.csv", f"error: {tmp_path / 'missing.csv'}: cannot read it"),
    ):
        result = run_cli(capsys, "ncu", "import", str(path), "--db", db_url)
        assert result.code == 1 and result.err.startswith(message), result.err
        assert result.err.count("\n") == 1
    with store.transaction(read_only=True) as session:
        assert session.scalars(select(NcuCounter)).all() == []


def test_probe_needs_a_cuda_device(
    store: Store, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ingest_toy(store)
    result = run_cli(capsys, "ncu", "probe", "toy", "--device", "fake", "--db", db_url)
    assert result.code == 1
    assert result.err == (
        "error: nothing to profile: NVTX ranges are for CUDA devices; this one runs on cpu\n"
    )


def test_probe_calls_each_configuration_once_in_its_range(
    store: Store, db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest_toy(store)
    events: list[Any] = []
    monkeypatch.setattr(nvtx, "nvtx_unavailable", lambda device: None)  # no GPU here
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: events.append(name))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: events.append("pop"))
    result = run_cli(capsys, "ncu", "probe", "toy", "--device", "fake", "--db", db_url)
    assert result.code == 0, result.err
    assert result.out.startswith("toy: 2 configurations called once in their NVTX range on ")
    with store.transaction(read_only=True) as session:
        keys = list(session.scalars(select(OperatorConfig.key).order_by(OperatorConfig.id)))
        assert session.scalars(select(NcuCounter)).all() == []
    assert events == [x for k in keys for x in (nvtx_range_name(k), "pop")]
