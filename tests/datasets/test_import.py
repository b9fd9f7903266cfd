"""`opdb import` of NeuSight data (an excerpt under tests/fixtures/neusight), on both databases."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import func, select

from operator_db.datasets.importer import ImportRefusedError, import_data_set
from operator_db.datasets.neusight.reader import NeuSight, neusight
from operator_db.db import queries
from operator_db.db.models import DataSource, DeviceKind, DevicePeak, Measurement, OperatorConfig
from operator_db.db.store import Store

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "neusight"
T4_ROWS = 16 * 3  # the first 3 rows of each of the 16 families' T4 files
L4_ROWS = 4
LN_T4 = "data/dataset/train/collect/ln/p2.1.0/Tesla T4.csv.gz"


def _counts(store: Store) -> dict[str | None, int]:
    with store.transaction(read_only=True) as session:
        names = queries.data_source_names(session)
        rows = session.execute(
            select(Measurement.source_id, func.count()).group_by(Measurement.source_id)
        )
        return {names.get(s) if s is not None else None: int(n) for s, n in rows}


def test_the_excerpt_imports_every_row_once_and_a_second_run_adds_nothing(store: Store) -> None:
    data = NeuSight(FIXTURE)
    with store.transaction() as session:
        report = import_data_set(session, data)
    total = report.total()
    # The merged ln file repeats 2 T4 rows: duplicates, not new results.
    assert (total.read, total.imported, total.duplicate, total.skipped) == (
        T4_ROWS + 2 + L4_ROWS,
        T4_ROWS + L4_ROWS,
        2,
        0,
    )
    assert report.kinds == ["NVIDIA L4", "Tesla T4"]
    assert report.new_configs == T4_ROWS + L4_ROWS  # the excerpt's shapes are all distinct
    assert _counts(store) == {"neusight": T4_ROWS + L4_ROWS}
    with store.transaction() as session:
        again = import_data_set(session, data).total()
        source = session.scalars(select(DataSource)).one()
        l4 = session.scalars(select(DeviceKind).where(DeviceKind.name == "NVIDIA L4")).one()
        peaks = session.scalars(
            select(DevicePeak).where(
                DevicePeak.device_kind_id == l4.id, DevicePeak.source == "spec"
            )
        ).all()
    assert (again.read, again.imported, again.duplicate, again.skipped) == (
        T4_ROWS + 2 + L4_ROWS,
        0,
        T4_ROWS + 2 + L4_ROWS,
        0,
    )
    assert _counts(store) == {"neusight": T4_ROWS + L4_ROWS}
    assert source.version == "6945927d9afcca2b9daf021f8395e53edc5b4eef"
    assert source.license == "MIT" and "5 fastest of 25" in (source.method or "")
    # The L4's kind carries the data set's own config and the correction of its SM count.
    assert l4.type == "gpu" and l4.architecture == "Ada Lovelace"
    assert l4.info["neusight"]["config"]["Num_Sm"] == 60
    assert l4.info["neusight"]["corrected"]["Num_Sm"] == 58
    assert {p.dtype for p in peaks} >= {"float32", None}  # the spec sheet's roofs


def test_an_imported_result_says_where_it_comes_from(store: Store) -> None:
    with store.transaction() as session:
        import_data_set(session, NeuSight(FIXTURE), files=[LN_T4])
        row = session.scalars(select(Measurement).order_by(Measurement.id).limit(1)).one()
        config = session.get(OperatorConfig, row.config_id)
        assert config is not None
    assert config.op == "torch.nn.LayerNorm" and config.inputs[0]["shape"] == [60, 272]
    assert row.time_median_s == pytest.approx(0.05036799982190132e-3)
    assert row.energy_per_call_j is None and row.host_id is None and row.job_id is None
    assert row.provenance["file"] == LN_T4 and row.provenance["line"] == 2
    assert row.provenance["kernel"].startswith("void at::native::")
    assert row.provenance["grid"] == [60, 1, 1] and row.provenance["block"] == [32, 4, 1]


def test_own_measurements_count_before_imported_ones(store: Store) -> None:
    """Where a configuration has both on a kind, the figure is the own one, whatever is newer."""
    with store.transaction() as session:
        import_data_set(session, NeuSight(FIXTURE), files=[LN_T4])
        imported = session.scalars(select(Measurement).order_by(Measurement.id).limit(1)).one()
        own = Measurement(
            config_id=imported.config_id,
            device_kind_id=imported.device_kind_id,
            dtype="float32",
            calls_per_block=10,
            blocks=20,
            time_median_s=1e-6,
            time_mean_s=1e-6,
            time_iqr_s=0.0,
            time_cv=0.0,
            created_at=imported.created_at.replace(year=2020),  # older than the import
        )
        session.add(own)
        session.flush()
        ids = [imported.config_id]
        kinds = [imported.device_kind_id]
        latest = queries.config_figures(session, ids, kinds)
        median = queries.config_figures(session, ids, kinds, aggregate="median")
        session.delete(own)
        session.flush()
        alone = queries.config_figures(session, ids, kinds)
    key = (imported.config_id, imported.device_kind_id, "eager")
    assert latest[key].time_median_s == median[key].time_median_s == 1e-6
    assert latest[key].source_id is None and latest[key].samples == 2
    assert alone[key].time_median_s == imported.time_median_s
    assert alone[key].source_id == imported.source_id


def _hostile_copy(tmp_path: Path) -> Path:
    root = tmp_path / "neusight"
    shutil.copytree(FIXTURE, root)
    path = root / LN_T4
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    good = frame.iloc[0].to_dict()
    bad = [
        {**good, "OPName": "frobnicate"},  # unknown op
        {**good, "Latency": "-0.5"},
        {**good, "Latency": "nan"},
        {**good, "Latency": "0"},
        {**good, "Latency": "fast"},
        {**good, "H": ""},  # missing shape
        {**good, "B": "-3"},
        {**good, "B": "2.5"},
        {**good, "B": "100000000000", "H": "100000"},  # absurd: over the tensor limit
        {**good, "Device": "NVIDIA H900"},  # no such GPU in the data set
    ]
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        pd.concat([frame, pd.DataFrame(bad)]).to_csv(handle, index=False)
    return root


def test_bad_rows_are_skipped_counted_and_said_with_their_file_and_line(
    store: Store, tmp_path: Path
) -> None:
    data = NeuSight(_hostile_copy(tmp_path))
    with store.transaction() as session:
        report = import_data_set(session, data, files=[LN_T4])
    (counts,) = report.files
    assert (counts.read, counts.imported, counts.skipped) == (13, 3, 10)
    said = [str(b) for b in report.bad]
    assert [b.line for b in report.bad] == list(range(5, 15))
    assert said[0] == f"{LN_T4}:5: unknown operator 'frobnicate'"
    assert "latency '-0.5' is not a positive number of ms" in said[1]
    assert all("is not a positive number" in s for s in said[2:5])
    assert "H must be a positive integer" in said[5]
    assert "B must be a positive integer" in said[6] and "B must be" in said[7]
    assert said[8].endswith("shape[0]: must be <= 2147483647, got 100000000000")
    assert said[9].endswith("unknown device 'NVIDIA H900'")
    assert _counts(store) == {"neusight": 3}


def test_refusing_bad_rows_writes_nothing(store: Store, tmp_path: Path) -> None:
    data = NeuSight(_hostile_copy(tmp_path))
    with (
        pytest.raises(
            ImportRefusedError, match=r"^10 bad rows, import refused \(nothing written\)"
        ),
        store.transaction() as session,
    ):
        import_data_set(session, data, on_bad="refuse")
    assert _counts(store) == {}
    with store.transaction(read_only=True) as session:
        assert session.scalar(select(func.count()).select_from(DataSource)) == 0


def test_a_file_or_folder_inside_the_data_set_imports_only_itself() -> None:
    _, files, labels = neusight(FIXTURE / LN_T4)
    assert (files, labels) == ([LN_T4], [])
    _, files, labels = neusight(FIXTURE / "data/dataset/test")
    assert (files, labels) == (["data/dataset/test/vec.csv.gz"], [])
    _, files, labels = neusight(FIXTURE / "label/Tesla_T4")
    assert files == [] and labels and all(f.startswith("label/Tesla_T4/") for f in labels)
    _, every, labels = neusight(FIXTURE)
    assert len(labels) == 3  # the label JSONs (a trace CSV goes with its JSON)
    assert len(every) == 18 and every[0].endswith("p2.1.0/Tesla T4.csv.gz")
    assert every[-2:] == ["data/dataset/test/vec.csv.gz", "data/dataset/train/collect/ln.csv.gz"]
