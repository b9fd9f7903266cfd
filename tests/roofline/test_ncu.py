"""Nsight Compute counters: the raw CSV, units, the FLOP formula, the import, the roofline.

``tests/fixtures/ncu_raw.csv`` is what ``ncu --nvtx --print-nvtx-rename kernel --csv --page raw``
prints (docs/ncu.md): ``==PROF==`` lines, a header row (identity columns, then the metric columns
in name order), a units row (auto-scaled: Kbyte, Mbyte, usecond), one row per kernel with
thousands grouped. Kernel 0 ran outside any range; kernels 1-3 are the Linear(16→32) of
``tests.helpers.spec_dict``, 4-5 its ReLU on 4x32, 6 a configuration of no stored model.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import func, select

from operator_db.db import queries
from operator_db.db.ingest import ingest_specs
from operator_db.db.models import DeviceKind, NcuCounter
from operator_db.db.store import Store
from operator_db.errors import InvalidInputError, NotFoundError
from operator_db.estimate.compose import estimate_model
from operator_db.roofline.bounds import Peaks
from operator_db.roofline.counters import counters_table, roofline_work
from operator_db.roofline.model import roofline_table
from operator_db.roofline.ncu import (
    DRAM_READ,
    METRICS,
    TIME,
    call_figures,
    fp_flops,
    import_counters,
    parse_raw_csv,
    unit_scale,
)
from operator_db.specs import parse_spec
from tests.estimate.test_compose import KIND, setup
from tests.helpers import spec_dict

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "ncu_raw.csv"
TEXT = FIXTURE.read_text()
GPU = "NVIDIA H100 80GB HBM3"
LINEAR = "cf3c8cef31340f79ae234e793d958f1248adafd2a59398310e33599d4e5f9c25"
RELU = "43514ce71518b2bffa89ecba3c23b7f78e3f83edb357e800a960daeaab2f9d74"
LINEAR_FIGURES = queries.CounterFigures(
    kernels=3,
    gpu_time_s=pytest.approx(5.65e-6),  # type: ignore[arg-type]
    dram_read_bytes=2500 + 750 + 128,  # 2.50 + 0.75 + 0.128 Kbyte
    dram_write_bytes=500 + 512 + 0,  # 0.0005 + 0.000512 + 0 Mbyte
    flops_fp32=128 + 128 + 2 * 2048,  # fadd + fmul + 2 × ffma
    flops_fp16=0,
    flops_fp64=0,
    tensor_instructions=0,
)
RELU_FIGURES = queries.CounterFigures(
    kernels=2,
    gpu_time_s=pytest.approx(1.5e-6),  # type: ignore[arg-type]
    dram_read_bytes=512,
    dram_write_bytes=512,
    flops_fp32=0,  # a max is no FP add, mul or fma: ncu counts no FLOP of a ReLU
    flops_fp16=0,
    flops_fp64=0,
    tensor_instructions=0,
)


def ingest_toy(store: Store) -> None:
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(spec_dict(), "toy.yaml")])


def stored(store: Store) -> list[NcuCounter]:
    with store.transaction(read_only=True) as session:
        rows = list(session.scalars(select(NcuCounter).order_by(NcuCounter.id)))
        session.expunge_all()
    return rows


def test_the_raw_csv_is_read_with_its_units() -> None:
    profile = parse_raw_csv(TEXT, "ncu_raw.csv")
    assert profile.metrics == tuple(m for m in METRICS if m != "device__attribute_display_name")
    assert [k.key for k in profile.kernels] == [None, LINEAR, LINEAR, LINEAR, RELU, RELU, "e" * 64]
    assert {k.device for k in profile.kernels} == {GPU}
    first = profile.kernels[1].values
    assert first[DRAM_READ] == pytest.approx(2500)  # 2.50 Kbyte
    assert first["dram__bytes_write.sum"] == pytest.approx(500)  # 0.000500 Mbyte
    assert first[TIME] == pytest.approx(3.5e-6)  # 3.50 usecond
    assert first["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"] == 2048  # "2,048"
    assert profile.kernels[6].values[DRAM_READ] == pytest.approx(1_024_000)  # "1,024.00" Kbyte


@pytest.mark.parametrize(
    ("unit", "quantity", "scale"),
    [
        ("byte", "bytes", 1),
        ("Kbyte", "bytes", 1e3),
        ("Mbyte", "bytes", 1e6),
        ("Gbyte", "bytes", 1e9),
        ("KiB", "bytes", 1024),
        ("nsecond", "seconds", 1e-9),
        ("usecond", "seconds", 1e-6),
        ("msecond", "seconds", 1e-3),
        ("second", "seconds", 1),
        ("inst", "count", 1),
        ("Kinst", "count", 1e3),
        ("", "count", 1),
    ],
)
def test_units_become_bytes_seconds_and_counts(unit: str, quantity: str, scale: float) -> None:
    assert unit_scale(unit, quantity) == scale  # type: ignore[arg-type]


@pytest.mark.parametrize(("unit", "quantity"), [("cycle", "seconds"), ("usecond", "bytes")])
def test_a_unit_of_something_else_is_refused(unit: str, quantity: str) -> None:
    with pytest.raises(InvalidInputError, match=f"unit '{unit}' is not one of {quantity}"):
        unit_scale(unit, quantity)  # type: ignore[arg-type]


def test_the_flop_formula_counts_an_fma_twice() -> None:
    assert fp_flops(1, 2, 3) == 1 + 2 + 2 * 3
    assert fp_flops(0, 0, 0) == 0
    assert fp_flops(1, None, 3) is None


def test_a_call_sums_its_kernels_per_precision() -> None:
    profile = parse_raw_csv(TEXT, "ncu_raw.csv")
    assert call_figures(profile.kernels[1:4], profile.metrics) == LINEAR_FIGURES
    unknown = call_figures(profile.kernels[6:], profile.metrics)
    assert (unknown.flops_fp16, unknown.flops_fp32) == (24 + 0 + 2 * 1000, 0)
    # A kernel without a value makes the sum unknown, not smaller.
    missing = TEXT.replace('"2.50","0.000500"', '"n/a","0.000500"')
    profile = parse_raw_csv(missing, "x.csv")
    figures = call_figures(profile.kernels[1:4], profile.metrics)
    assert (figures.dram_read_bytes, figures.dram_write_bytes) == (None, 1012)
    assert figures.dram_bytes is None


def test_import_stores_each_configuration_of_the_file(store: Store) -> None:
    ingest_toy(store)
    with store.transaction() as session:
        summary = import_counters(session, TEXT, "ncu_raw.csv")
    assert summary.line() == (
        f"ncu_raw.csv: 7 kernels; counters of 2 configurations on {GPU} stored; 1 kernels "
        "outside any opdb range, 1 ranges of configurations not in the database, 0 "
        "configurations profiled more than once (the last call kept)"
    )
    rows = stored(store)
    assert [queries.CounterFigures.of(r) for r in rows] == [LINEAR_FIGURES, RELU_FIGURES]
    assert {r.source for r in rows} == {"ncu_raw.csv"}
    with store.transaction(read_only=True) as session:
        kind = queries.get_device_kind(session, GPU)  # the CSV's device name: a new GPU kind
        assert kind.type == "gpu"
        counters = queries.model_counters(session, queries.get_model(session, "toy").id, kind.id)
        assert sorted(counters) == sorted([LINEAR, RELU])
        table = counters_table(session, "toy", GPU)
    assert list(table["op"]) == ["torch.nn.Linear", "torch.nn.ReLU"]
    assert list(table["spec_flops"]) == [2 * 4 * 16 * 32, 4 * 32]
    assert list(table["ncu_flops"]) == [4352, 0]
    assert list(table["dram_bytes"]) == [3378 + 1012, 1024]


def test_reimport_adds_rows_and_the_newest_counts(store: Store) -> None:
    ingest_toy(store)
    with store.transaction() as session:
        import_counters(session, TEXT, "first.csv")
    with store.transaction() as session:
        import_counters(session, TEXT.replace('"2.50","0.000500"', '"5.00","0.000500"'), "2.csv")
    assert len(stored(store)) == 4  # nothing is lost
    with store.transaction(read_only=True) as session:
        kind = queries.get_device_kind(session, GPU)
        newest = queries.model_counters(session, queries.get_model(session, "toy").id, kind.id)
        assert newest[LINEAR].dram_read_bytes == 5000 + 750 + 128
        assert newest[LINEAR].source == "2.csv"
        assert newest[RELU].source == "2.csv"


def test_a_configuration_profiled_twice_keeps_its_last_call(store: Store) -> None:
    ingest_toy(store)
    lines = TEXT.splitlines()
    assert lines[-7].startswith('"1","4711"')  # the Linear's first kernel
    again = lines[-7].replace('"1","4711"', '"7","4711"', 1).replace('"2.50"', '"9.00"')
    text = "\n".join([*lines[:-1], again, lines[-1]])
    with store.transaction() as session:
        summary = import_counters(session, text, "twice.csv")
    assert summary.repeated == 1
    linear = next(r for r in stored(store) if r.kernels == 1)
    assert linear.dram_read_bytes == 9000


def test_the_range_may_be_in_an_nvtx_column_with_the_kernel_named(store: Store) -> None:
    """Without --print-nvtx-rename the kernel keeps its name; the range stack is a column."""
    ingest_toy(store)
    lines = TEXT.splitlines()
    out = []
    for line in lines:
        if line.startswith('"ID"'):
            line = line.replace('"Kernel Name",', '"Kernel Name","NVTX",')
        elif line.startswith('"",'):
            line = '"",' + line
        elif line.startswith('"'):
            cells = line.split('","')
            name = cells[4]
            stack = f"<default domain>/{name}" if name.startswith("opdb:") else ""
            cells[4:5] = ["ampere_sgemm_32x32_sliced1x4_tn", stack]
            line = '","'.join(cells)
        out.append(line)
    with store.transaction() as session:
        summary = import_counters(session, "\n".join(out), "nvtx.csv")
    assert (summary.stored, summary.outside, summary.unknown) == ({GPU: 2}, 1, 1)
    assert [queries.CounterFigures.of(r) for r in stored(store)] == [LINEAR_FIGURES, RELU_FIGURES]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not an Nsight Compute raw CSV"),
        ("a,b\n1,2\n", "not an Nsight Compute raw CSV"),
        (
            '"ID","Process ID","Kernel Name","Section Name","Metric Name","Metric Unit",'
            '"Metric Value"\n"0","1","k","SOL","dram__bytes_read.sum","byte","1"\n',
            "details page",
        ),
        ('"ID","Kernel Name","dram__bytes_read.sum"\n"0","k","1"\n', "no units row"),
        ('"ID","Kernel Name","sm__cycles_elapsed.avg"\n"","",""\n', "none of the metrics"),
        (TEXT.replace('"Kbyte"', '"cycle"'), "column dram__bytes_read.sum: unit 'cycle'"),
    ],
)
def test_a_file_that_is_not_an_ncu_raw_csv_is_one_line_and_stores_nothing(
    store: Store, text: str, message: str
) -> None:
    ingest_toy(store)
    with pytest.raises(InvalidInputError, match=message) as info, store.transaction() as session:
        import_counters(session, text, "bad.csv")
    assert "\n" not in str(info.value) and str(info.value).startswith("bad.csv: ")
    assert stored(store) == []


def _without_device_name(text: str) -> str:
    """Drop the device__attribute_display_name column (the 12th)."""
    out = []
    for line in text.splitlines():
        if line.startswith('"'):
            cells = line.split('","')
            line = '","'.join(cells[:11] + cells[12:])
        out.append(line)
    return "\n".join(out)


def test_the_device_kind_comes_from_the_option_where_the_csv_has_no_name(store: Store) -> None:
    ingest_toy(store)
    text = _without_device_name(TEXT)
    needs = pytest.raises(InvalidInputError, match="name it with --device-kind")
    with needs, store.transaction() as session:
        import_counters(session, text, "x.csv")
    with pytest.raises(NotFoundError), store.transaction() as session:
        import_counters(session, text, "x.csv", device_kind="NVIDIA A100-SXM4-80GB")
    assert stored(store) == []
    with store.transaction() as session:
        queries.get_or_create_device_kind(session, "NVIDIA A100-SXM4-80GB", "gpu")
    with store.transaction() as session:
        summary = import_counters(session, text, "x.csv", device_kind="NVIDIA A100-SXM4-80GB")
    assert summary.stored == {"NVIDIA A100-SXM4-80GB": 2}


def test_a_device_name_that_contradicts_the_option_is_refused(store: Store) -> None:
    ingest_toy(store)
    refused = pytest.raises(InvalidInputError, match=f"profiled on {GPU}, not on 'cpu:x'")
    with refused, store.transaction() as session:
        import_counters(session, TEXT, "x.csv", device_kind="cpu:x")
    with store.transaction(read_only=True) as session:
        assert session.scalar(select(func.count()).select_from(DeviceKind)) == 0


def test_the_roofline_uses_measured_work_where_counted(store: Store) -> None:
    setup(store)  # the model 'toy' on KIND: Linear and ReLU (twice) measured, one opaque
    with store.transaction() as session:
        import_counters(session, TEXT.replace(GPU, KIND), "ncu_raw.csv")
        est = estimate_model(session, "toy", KIND)
        model_id = queries.get_model(session, "toy").id
        kind_id = queries.get_device_kind(session, KIND).id
        counters = {
            k: queries.CounterFigures.of(r)
            for k, r in queries.model_counters(session, model_id, kind_id).items()
        }
    peaks = Peaks(1e9, 1e8, "test")
    plain = roofline_table(est, peaks, None).set_index("op")
    table = roofline_table(est, peaks, None, counters).set_index("op")
    assert set(plain["source"]) == {"spec"}
    linear = table.loc["torch.nn.Linear"]
    assert (linear["flops"], linear["bytes"], linear["source"]) == (4352, 4390, "ncu")
    assert linear["roofline_spec_s"] == pytest.approx(max(4352 / 1e9, 4390 / 1e8))
    relu = table.loc["torch.nn.ReLU"]
    assert (relu["flops"], relu["bytes"], relu["source"]) == (0, 1024, "ncu")
    model = table.loc["(model)"]
    assert (model["flops"], model["bytes"], model["source"]) == (4352, 4390 + 2 * 1024, "ncu")


def test_tensor_work_keeps_the_spec_flops() -> None:
    def figures(tensor: int | None) -> queries.CounterFigures:
        return queries.CounterFigures(1, 1e-6, 10, 20, 100, 0, 0, tensor)

    assert roofline_work(500.0, 40.0, None) == (500.0, 40.0, "spec")
    assert roofline_work(500.0, 40.0, figures(0)) == (100.0, 30.0, "ncu")
    assert roofline_work(500.0, 40.0, figures(7)) == (500.0, 30.0, "ncu bytes")
    assert roofline_work(500.0, 40.0, figures(None)) == (500.0, 30.0, "ncu bytes")
    no_bytes = queries.CounterFigures(1, 1e-6, None, 20, 100, 0, 0, 0)
    assert roofline_work(500.0, 40.0, no_bytes) == (100.0, 40.0, "ncu FLOPs")


def test_the_report_says_which_work_is_measured(store: Store, tmp_path: Path) -> None:
    from operator_db.report import build_report

    setup(store)
    with store.transaction(read_only=True) as session:
        text = build_report(session, tmp_path / "before").read_text()
    assert "No configuration of the measured models has hardware counters" in text
    assert (tmp_path / "before" / "ncu_counters.csv").read_text().startswith("key,op,")
    with store.transaction() as session:
        import_counters(session, TEXT.replace(GPU, KIND), "ncu_raw.csv")
    with store.transaction(read_only=True) as session:
        text = build_report(session, tmp_path / "after").read_text()
    # Linear once, ReLU twice: spec 4096 + 2 × 128 FLOPs, 2944 + 2 × 1024 B; ncu 4352 + 0 FLOPs,
    # 4390 + 2 × 1024 B.
    assert f"| toy | {KIND} | 2 | 2 | 4.352e-06 | 4.352e-06 | 0 | 0.004992 | 0.006438 |" in text
    rows = pd.read_csv(tmp_path / "after" / "ncu_counters.csv")
    assert list(rows["op"]) == ["torch.nn.Linear", "torch.nn.ReLU"]
    assert set(rows["model"]) == {"toy"}


def test_the_api_lists_a_configurations_newest_counters_per_kind(db_url: str) -> None:
    from fastapi.testclient import TestClient
    from pydantic import SecretStr

    from api.app import create_app
    from operator_db.config import Settings

    settings = Settings(database_url=db_url, api_token=SecretStr("t"))
    with TestClient(create_app(settings)) as client:
        store = Store.open(db_url)
        try:
            ingest_toy(store)
            assert client.get(f"/configurations/{LINEAR}/counters").json() == []
            with store.transaction() as session:
                import_counters(session, TEXT, "old.csv")
            with store.transaction() as session:
                import_counters(session, TEXT, "new.csv")
        finally:
            store.close()
        [row] = client.get(f"/configurations/{LINEAR}/counters").json()
        assert client.get("/configurations/" + "0" * 64 + "/counters").status_code == 404
    assert (row["device_kind"], row["source"], row["kernels"]) == (GPU, "new.csv", 3)
    assert (row["dram_read_bytes"], row["dram_write_bytes"], row["flops_fp32"]) == (
        3378,
        1012,
        4352,
    )
    assert row["gpu_time_s"] == pytest.approx(5.65e-6)
