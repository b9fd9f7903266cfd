"""The spec format: validation with file-and-path errors, canonical keys, YAML round trip."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from operator_db.errors import SpecError
from operator_db.specs import (
    SPEC_VERSION,
    dump_spec,
    load_spec,
    load_spec_text,
    operator_key,
    parse_spec,
)
from operator_db.specs.io import expand_spec_paths, mark_processed, write_spec
from tests.helpers import EXAMPLE_SPECS, linear_op, spec_dict

MAX = 16 * 1024 * 1024


def write(tmp_path: Path, data: Any, name: str = "resnet50.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def error_of(tmp_path: Path, data: Any, name: str = "resnet50.yaml", **kw: int) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, data, name), max_bytes=kw.get("max_bytes", MAX))
    message = str(info.value)
    assert "\n" not in message
    return message.replace(str(tmp_path) + "/", "")


def test_valid_spec_loads_with_keys_and_hash(tmp_path: Path) -> None:
    loaded = load_spec(write(tmp_path, spec_dict()), max_bytes=MAX)
    assert loaded.spec.model.name == "toy"
    assert [op.count for op in loaded.spec.operators] == [1, 2]
    assert len(loaded.keys) == 2 and all(len(k) == 64 for k in loaded.keys)
    assert len(loaded.content_hash) == 64


def test_example_specs_are_valid() -> None:
    files = expand_spec_paths([EXAMPLE_SPECS])
    assert files, "measurement_specs/ ships at least one spec"
    for path in files:
        assert load_spec(path, max_bytes=MAX).spec.operators


def test_negative_dimension_names_file_and_path(tmp_path: Path) -> None:
    data = spec_dict()
    data["operators"].append(copy.deepcopy(linear_op(8, 8)))
    data["operators"].append(copy.deepcopy(linear_op(8, 16)))
    data["operators"][3]["inputs"][0]["shape"][1] = -1
    assert error_of(tmp_path, data) == (
        "resnet50.yaml: operators[3].inputs[0].shape[1]: must be positive, got -1"
    )


def test_zero_dimension(tmp_path: Path) -> None:
    data = spec_dict()
    data["model"]["inputs"][0]["shape"] = [0, 16]
    assert (
        error_of(tmp_path, data)
        == "resnet50.yaml: model.inputs[0].shape[0]: must be positive, got 0"
    )


def test_wrong_type_is_not_coerced(tmp_path: Path) -> None:
    data = spec_dict()
    data["operators"][0]["count"] = "3"
    assert error_of(tmp_path, data) == (
        "resnet50.yaml: operators[0].count: input should be a valid integer, got '3'"
    )
    data["operators"][0]["count"] = True
    assert error_of(tmp_path, data).startswith("resnet50.yaml: operators[0].count: ")


def test_unknown_field(tmp_path: Path) -> None:
    data = spec_dict()
    data["operators"][1]["colour"] = "red"
    assert error_of(tmp_path, data) == "resnet50.yaml: operators[1].colour: unknown field"


def test_missing_field(tmp_path: Path) -> None:
    data = spec_dict()
    del data["operators"][0]["op"]
    assert error_of(tmp_path, data) == "resnet50.yaml: operators[0].op: required field is missing"


def test_unknown_spec_version(tmp_path: Path) -> None:
    data = spec_dict()
    data["spec_version"] = 4
    assert error_of(tmp_path, data) == (
        "resnet50.yaml: spec_version: unknown spec_version 4; this operator-db reads 1, 2, 3"
    )


def test_version_1_specs_are_read_with_kind_as_form(tmp_path: Path) -> None:
    """Version 1 named an operator's form ``kind``: such files still load, with the same keys and
    content hash as their version-2 form (stored models and configurations stay identical)."""
    current = spec_dict()
    old = copy.deepcopy(current)
    old["spec_version"] = 1
    for op in old["operators"]:
        op["kind"] = op.pop("form")
    loaded_old, loaded_new = parse_spec(old, "old.yaml"), parse_spec(current, "new.yaml")
    assert loaded_old.spec.spec_version == SPEC_VERSION == 3
    assert [op.form for op in loaded_old.spec.operators] == [op["kind"] for op in old["operators"]]
    assert loaded_old.keys == loaded_new.keys
    assert loaded_old.content_hash == loaded_new.content_hash
    # A version-2 file must say form: kind is unknown there.
    current["operators"][0]["kind"] = current["operators"][0].pop("form")
    assert error_of(tmp_path, current).startswith("resnet50.yaml: operators[0]")


def test_unknown_dtype_and_form(tmp_path: Path) -> None:
    data = spec_dict()
    data["operators"][0]["inputs"][0]["dtype"] = "float33"
    assert error_of(tmp_path, data).startswith(
        "resnet50.yaml: operators[0].inputs[0].dtype: must be one of 'float64', 'float32'"
    )
    data = spec_dict()
    data["operators"][0]["form"] = "lambda"
    assert "operators[0].form: must be one of 'module', 'function' or 'opaque', got 'lambda'" in (
        error_of(tmp_path, data)
    )


def test_broken_yaml_names_line(tmp_path: Path) -> None:
    text = "spec_version: 1\nmodel: {name: x\noperators: []\n"
    message = error_of(tmp_path, text)
    assert message.startswith("resnet50.yaml: line 3, column ")
    assert "invalid YAML" in message


def test_duplicate_mapping_key(tmp_path: Path) -> None:
    text = "spec_version: 1\nspec_version: 1\n"
    assert error_of(tmp_path, text) == (
        "resnet50.yaml: line 2, column 1: invalid YAML: duplicate key 'spec_version' (line 2)"
    )


def test_top_level_must_be_mapping_and_not_empty(tmp_path: Path) -> None:
    assert error_of(tmp_path, "- 1\n- 2\n") == "resnet50.yaml: a spec must be a mapping, got list"
    assert error_of(tmp_path, "") == "resnet50.yaml: the file is empty"


def test_large_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("w") as f:
        f.write("spec_version: 1\n# " + "x" * (50 * 1024 * 1024) + "\n")
    with pytest.raises(SpecError) as info:
        load_spec(path, max_bytes=MAX)
    assert str(info.value) == (
        f"{path}: file is {path.stat().st_size} bytes, over the limit of {MAX} bytes "
        "(OPDB_MAX_SPEC_BYTES)"
    )


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"spec_version: 1\n\xff\xfe")
    with pytest.raises(SpecError, match=r"bin.yaml: not UTF-8 text \(byte 16\)"):
        load_spec(path, max_bytes=MAX)


def test_absurd_shape(tmp_path: Path) -> None:
    data = spec_dict()
    data["operators"][0]["inputs"][0]["shape"] = [1 << 20, 1 << 20, 1 << 20]
    assert error_of(tmp_path, data) == (
        "resnet50.yaml: operators[0].inputs[0].shape: tensor of 1152921504606846976 elements is "
        "larger than the limit of 1099511627776"
    )


def test_call_reference_out_of_range(tmp_path: Path) -> None:
    data = spec_dict()
    data["operators"][1]["call"] = {"args": [{"tensor": 0}, {"tensor": 3}]}
    assert error_of(tmp_path, data) == (
        "resnet50.yaml: operators[1]: call refers to tensor 3 but there are 1 inputs"
    )


def test_duplicate_configuration(tmp_path: Path) -> None:
    data = spec_dict(operators=[linear_op(count=1), linear_op(count=2)])
    assert error_of(tmp_path, data) == (
        "resnet50.yaml: operators[1]: same configuration as operators[0]; merge them and add their "
        "counts"
    )


def test_stale_key(tmp_path: Path) -> None:
    data = spec_dict()
    data["operators"][0]["key"] = "0" * 64
    assert error_of(tmp_path, data).startswith(
        "resnet50.yaml: operators[0].key: does not match the configuration"
    )


def test_exponent_without_dot_is_a_float() -> None:
    data = spec_dict()
    text = yaml.safe_dump(data).replace("bias: true", "bias: true\n    eps: 1e-5")
    loaded = load_spec_text(text, "x.yaml")
    assert loaded.spec.operators[0].args["eps"] == 1e-5


def test_key_is_stable_and_ignores_derived_fields() -> None:
    spec = parse_spec(spec_dict(), "a").spec
    op = spec.operators[0]
    # Golden value: a change of the canonical form changes every stored key; make it deliberate.
    assert operator_key(op, "inference") == (
        "cf3c8cef31340f79ae234e793d958f1248adafd2a59398310e33599d4e5f9c25"
    )
    other = op.model_copy(update={"count": 7, "flops": 1, "bytes": 2, "locations": ["x"]})
    assert operator_key(other, "inference") == operator_key(op, "inference")
    assert operator_key(op, "training") != operator_key(op, "inference")
    wider = parse_spec(spec_dict(operators=[linear_op(16, 33)]), "b").spec.operators[0]
    assert operator_key(wider, "inference") != operator_key(op, "inference")


def test_content_hash_ignores_provenance_and_processed() -> None:
    base = spec_dict()
    a = parse_spec(base, "a")
    b = parse_spec({**base, "provenance": {"date": "2026-01-01"}, "processed": True}, "b")
    assert a.content_hash == b.content_hash
    changed = copy.deepcopy(base)
    changed["operators"][1]["count"] = 3
    assert parse_spec(changed, "c").content_hash != a.content_hash


def test_dump_round_trip() -> None:
    loaded = parse_spec(spec_dict(), "a")
    text = dump_spec(loaded.spec)
    again = load_spec_text(text, "b")
    assert again.spec.model_dump(exclude={"operators"}) == loaded.spec.model_dump(
        exclude={"operators"}
    )
    assert again.keys == loaded.keys
    assert [op.key for op in again.spec.operators] == list(loaded.keys)
    assert "shape: [4, 16]" in text


def test_expand_paths(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    write(tmp_path / "a", spec_dict("m1"), "one.yaml")
    write(tmp_path / "a", spec_dict("m2"), "two.yml")
    (tmp_path / "a" / "notes.txt").write_text("not a spec")
    files = expand_spec_paths([tmp_path / "a", str(tmp_path / "a" / "*.yaml")])
    assert [f.name for f in files] == ["one.yaml", "two.yml"]
    with pytest.raises(SpecError, match="nothing.yaml: no such file"):
        expand_spec_paths([tmp_path / "nothing.yaml"])


def test_mark_processed_keeps_the_rest(tmp_path: Path) -> None:
    path = write(tmp_path, "# comment\nspec_version: 1\nprocessed: false\n")
    mark_processed(path)
    assert path.read_text() == "# comment\nspec_version: 1\nprocessed: true\n"
    path = write(tmp_path, "spec_version: 1\n", "b.yaml")
    mark_processed(path)
    assert path.read_text() == "spec_version: 1\nprocessed: true\n"


def test_a_call_order_names_each_operator_count_times(tmp_path: Path) -> None:
    """Version 3's ``calls``: indices into operators in call order, each ``count`` times."""
    data = spec_dict()
    counts = [op.get("count", 1) for op in data["operators"]]
    order = [i for i, n in enumerate(counts) for _ in range(n)][::-1]
    loaded = parse_spec({**data, "calls": order}, "ok.yaml")
    assert loaded.spec.calls == order
    assert loaded.content_hash != parse_spec(data, "no-order.yaml").content_hash
    # It survives writing and reading back, as wrapped lines of integers.
    path = tmp_path / "ordered.yaml"
    write_spec(loaded.spec, path)
    assert load_spec(path, max_bytes=10**6).spec.calls == order
    assert "\ncalls: [" in path.read_text()
    bad = len(counts)
    assert error_of(tmp_path, {**data, "calls": [*order[:-1], bad]}) == (
        f"resnet50.yaml: calls[{len(order) - 1}] is operator {bad}, but there are "
        f"{len(counts)} operators"
    )
    assert error_of(tmp_path, {**data, "calls": order[1:]}).startswith(
        f"resnet50.yaml: calls name operators[{order[0]}] {counts[order[0]] - 1} times, "
        f"but its count is {counts[order[0]]}"
    )
    assert error_of(tmp_path, {**data, "calls": [-1]}) == (
        "resnet50.yaml: calls[0]: must be >= 0, got -1"
    )


def test_a_version_2_spec_without_calls_keeps_its_content_hash() -> None:
    """A stored model of spec version 2 is not seen as changed: no order, same hash."""
    data = spec_dict()
    old = {**data, "spec_version": 2}
    loaded_old, loaded_new = parse_spec(old, "old.yaml"), parse_spec(data, "new.yaml")
    assert loaded_old.spec.calls is None
    assert loaded_old.content_hash == loaded_new.content_hash


def test_syncs_are_increasing_positions_in_the_calls(tmp_path: Path) -> None:
    data = spec_dict()
    counts = [op.get("count", 1) for op in data["operators"]]
    order = [i for i, n in enumerate(counts) for _ in range(n)]
    ok = parse_spec({**data, "calls": order, "syncs": [1, len(order)]}, "ok.yaml")
    assert ok.spec.syncs == [1, len(order)]
    assert ok.content_hash != parse_spec({**data, "calls": order}, "ok.yaml").content_hash
    path = tmp_path / "synced.yaml"
    write_spec(ok.spec, path)
    assert load_spec(path, max_bytes=10**6).spec.syncs == [1, len(order)]
    assert error_of(tmp_path, {**data, "syncs": [0]}).endswith(
        "syncs are positions in calls, and there are no calls"
    )
    assert error_of(tmp_path, {**data, "calls": order, "syncs": [2, 1]}).endswith(
        f"syncs[1] is 1: syncs are increasing positions from 0 to {len(order)} (the number of "
        "calls)"
    )
    assert "syncs[0] is" in error_of(tmp_path, {**data, "calls": order, "syncs": [len(order) + 1]})
