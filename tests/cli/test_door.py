"""What ``opdb ingest`` and ``opdb enqueue`` refuse at the door: one line, exit code 1, and the
database as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from operator_db.config import get_settings
from operator_db.db.engine import make_engine
from operator_db.db.store import Store
from tests.door_cases import BAD_SPECS
from tests.helpers import EXAMPLE_SPECS, relu_op, run_cli, snapshot, spec_dict


@pytest.fixture
def ingested(capsys: pytest.CaptureFixture[str], db_url: str) -> str:
    spec = str(EXAMPLE_SPECS / "mlp-small-b8.yaml")
    assert run_cli(capsys, "ingest", spec, "--db", db_url).code == 0
    return db_url


def test_bad_specs_are_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], ingested: str, tmp_path: Path
) -> None:
    engine = make_engine(ingested)
    before = snapshot(engine)
    for case, (text, detail) in BAD_SPECS.items():
        path = tmp_path / "bad.yaml"
        path.write_text(text)
        result = run_cli(capsys, "ingest", str(path), "--db", ingested)
        assert result.code == 1, case
        lines = result.err.strip().splitlines()
        assert len(lines) == 1, (case, result.err)
        assert lines[0].startswith(f"error: {path}: {detail}"), (case, lines[0])
        assert snapshot(engine) == before, case
    engine.dispose()


def test_the_tensor_limit_is_read_from_the_environment(
    capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(spec_dict("big", [relu_op([2**17, 2**17])])))
    refused = run_cli(capsys, "ingest", str(path), "--db", db_url)
    assert refused.code == 1
    assert "over the limit of 8589934592 (OPDB_MAX_TENSOR_NUMEL)" in refused.err
    monkeypatch.setenv("OPDB_MAX_TENSOR_NUMEL", str(2**34))
    monkeypatch.setenv("OPDB_MAX_TENSOR_BYTES", str(2**37))  # 2**34 float32 elements: 64 GiB
    get_settings.cache_clear()
    assert run_cli(capsys, "ingest", str(path), "--db", db_url).code == 0


PRINTABLE = "names hold printable characters only"


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("", "a device kind's name must not be empty"),
        ("x" * 100_000, "device kind name of 100000 characters, over the limit of 200"),
        ("GPU\tX", "device kind 'GPU\\tX' holds a control character U+0009: " + PRINTABLE),
        (
            "GPU\u202eX",
            "device kind 'GPU\\u202eX' holds a format character U+202E "
            "(RIGHT-TO-LEFT OVERRIDE): " + PRINTABLE,
        ),
        ("A/B", "device kind 'A/B' holds '/', which a URL's path cannot carry in a name"),
    ],
)
def test_enqueue_refuses_bad_device_kinds(
    capsys: pytest.CaptureFixture[str], ingested: str, kind: str, message: str
) -> None:
    with Store.open(ingested) as store:
        before = snapshot(store.engine)
    result = run_cli(capsys, "enqueue", "mlp-small-b8", "--device-kind", kind, "--db", ingested)
    assert result.code == 1
    assert result.err.strip() == f"error: {message}"
    with Store.open(ingested) as store:
        assert snapshot(store.engine) == before
