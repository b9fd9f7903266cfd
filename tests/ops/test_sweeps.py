"""``opdb sweep``: grids of one operator type as a spec, counted, admitted, stored, measured."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from operator_db.config import FAST_FAKE_MEASURE
from operator_db.errors import InvalidInputError
from operator_db.ops.admission import admit_spec
from operator_db.ops.sweeps import SWEEPS, get_sweep, parse_values, points, sweep_spec
from operator_db.specs.io import load_spec, parse_spec
from tests.helpers import run_cli


@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_every_sweep_is_a_valid_counted_spec(name: str) -> None:
    sweep = SWEEPS[name]
    spec = sweep_spec(sweep)
    admit_spec(parse_spec(spec.model_dump(mode="json"), name), max_tensor_numel=2**33)
    grid = math.prod(len(v) for v in sweep.grid.values())
    assert 0 < len(spec.operators) <= grid
    assert spec.model.name == f"sweep-{name}" and spec.model.reference is None
    for op in spec.operators:
        assert op.flops and op.flops > 0 and op.bytes and op.bytes > 0 and op.outputs
    keys = parse_spec(spec.model_dump(mode="json"), name).keys
    assert len(set(keys)) == len(keys)  # every point a distinct configuration
    assert sweep_spec(sweep).operators == spec.operators  # the same grid, the same spec


def test_matmul_and_linear_points_cost_2mnk() -> None:
    spec = sweep_spec(get_sweep("matmul"), {"m": [64], "n": [32], "k": [16, 8]})
    assert [op.flops for op in spec.operators] == [2 * 64 * 32 * 16, 2 * 64 * 32 * 8]
    assert [op.outputs[0].shape for op in spec.operators] == [[64, 32], [64, 32]]
    linear = sweep_spec(get_sweep("linear"), {"m": [4], "n": [8], "k": [16]}).operators[0]
    assert (linear.flops, linear.params) == (2 * 4 * 8 * 16, 16 * 8 + 8)


def test_a_kernel_larger_than_the_image_is_left_out() -> None:
    values = {"batch": [1], "channels": [16], "kernel": [3], "stride": [1], "size": [2, 14]}
    spec = sweep_spec(get_sweep("conv2d"), values)
    assert [op.inputs[0].shape for op in spec.operators] == [[1, 16, 14, 14]]


def test_bad_values_and_limits_are_one_line_errors() -> None:
    assert parse_values(["m=1,2", "k=3"]) == {"m": [1, 2], "k": [3]}
    for bad in ("m", "m=", "m=0", "m=a,b", "=3"):
        with pytest.raises(InvalidInputError, match="expected NAME=1,2,3"):
            parse_values([bad])
    with pytest.raises(InvalidInputError, match="no dimension 'q'"):
        list(points(get_sweep("matmul"), {"q": [1]}))
    with pytest.raises(InvalidInputError, match="27 points, over the limit of 10"):
        sweep_spec(get_sweep("matmul"), limit=10)
    with pytest.raises(InvalidInputError, match="unknown sweep 'conv3d'"):
        get_sweep("conv3d")


def test_a_sweep_is_stored_and_measured_like_any_spec(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in FAST_FAKE_MEASURE.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "mm.yaml"
    made = run_cli(capsys, "sweep", "matmul", "m=8,16", "n=8", "k=8", "-o", str(path))
    assert made.code == 0, made.err
    assert "sweep-matmul: 2 configurations of matmul" in made.out
    assert len(load_spec(path, max_bytes=10**6).spec.operators) == 2
    assert run_cli(capsys, "ingest", str(path)).code == 0
    measured = run_cli(capsys, "measure", "sweep-matmul", "--device", "fake", "--no-model-run")
    assert measured.code == 0, measured.err
    assert "done 2, failed 0" in measured.out
    listed = run_cli(capsys, "sweep", "--list")
    assert listed.code == 0 and "conv2d" in listed.out and "attention" in listed.out
    bad = run_cli(capsys, "sweep", "matmul", "q=1")
    assert bad.code == 1 and "no dimension 'q'" in bad.err
