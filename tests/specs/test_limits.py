"""Bounds of the spec schema: 64-bit integers, bounded free-form JSON and strings."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from operator_db.errors import SpecError
from operator_db.specs import load_spec_text, parse_spec
from operator_db.specs.limits import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    MAX_JSON_BYTES,
    MAX_JSON_STRING,
)
from tests.helpers import linear_op, spec_dict


def spec_error(data: Any) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(data, "x.yaml")
    message = str(info.value)
    assert "\n" not in message
    return message


def test_count_and_batch_size_fit_their_32_bit_columns() -> None:
    data = spec_dict()
    data["operators"][0]["count"] = 2**31
    assert spec_error(data) == f"x.yaml: operators[0].count: must be <= {INT32_MAX}, got {2**31}"
    data["operators"][0]["count"] = INT32_MAX
    parse_spec(data, "x.yaml")
    data = spec_dict()
    data["model"]["batch_size"] = 2**31
    assert spec_error(data) == f"x.yaml: model.batch_size: must be <= {INT32_MAX}, got {2**31}"


@pytest.mark.parametrize("field", ["flops", "flops_backward", "bytes", "params"])
def test_integers_beyond_64_bits_are_refused(field: str) -> None:
    data = spec_dict()
    data["operators"][0][field] = 2**63
    data["operators"][1]["count"] = 1
    assert spec_error(data) == (
        f"x.yaml: operators[0].{field}: must be <= {INT64_MAX}, got {2**63}"
    )
    op = data["operators"][0] | {"count": 1, "flops": None, "bytes": None, "params": 0}
    data["operators"] = [op | {field: INT64_MAX}]
    parse_spec(data, "x.yaml")


def test_batch_size_and_value_range_are_64_bit() -> None:
    data = spec_dict()
    data["model"]["batch_size"] = 2**64
    assert spec_error(data).startswith("x.yaml: model.batch_size: must be <=")
    data = spec_dict()
    data["model"]["inputs"][0] |= {"dtype": "int64", "value_range": [INT64_MIN - 1, 0]}
    assert spec_error(data).startswith("x.yaml: model.inputs[0].value_range[0]: must be >=")


def test_model_totals_must_fit_64_bits() -> None:
    data = spec_dict()
    data["operators"][0] |= {"count": 2**30, "flops": 2**40}
    assert spec_error(data) == (
        f"x.yaml: the model's flops (count × flops, summed over operators) is {2**70 + 2 * 128}, "
        "over 2**63 - 1"
    )


@pytest.mark.parametrize(
    ("where", "value", "path", "message"),
    [
        ("args", {"in_features": 2**64}, "args", "in_features: integer 18446744073709551616"),
        ("args", {"x": [1, {"y": -(2**63) - 1}]}, "args", "x[1].y: integer -9223372036854775809"),
        ("args", {"eps": float("inf")}, "args", "eps: inf is not a finite number"),
        ("args", {"eps": float("nan")}, "args", "eps: nan is not a finite number"),
        ("args", {"s": "x" * (MAX_JSON_STRING + 1)}, "args", "s: string of 4097 characters"),
        ("args", {"s": "a\x00b"}, "args", "s: string holds a NUL character"),
        ("args", {"k" * 5000: 1}, "args", "k" * 40 + ": key: string of 5000 characters"),
        ("call", {"args": [2**70]}, "call.args", "[0]: integer 1180591620717411303424"),
        ("call", {"kwargs": {"d": 1e400}}, "call.kwargs", "d: inf is not a finite number"),
    ],
)
def test_operator_json_is_bounded(where: str, value: Any, path: str, message: str) -> None:
    data = spec_dict()
    data["operators"][0][where] = value
    assert spec_error(data).startswith(f"x.yaml: operators[0].{path}: {message}")


def test_json_depth_and_size_are_bounded() -> None:
    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    data = spec_dict()
    data["provenance"] = {"deep": deep}
    assert spec_error(data).startswith(
        "x.yaml: provenance: deep" + "[0]" * 31 + ": nested deeper than 32 levels"
    )
    data = spec_dict()
    data["model"]["overrides"] = {f"k{i}": "x" * 1000 for i in range(70)}
    assert spec_error(data).startswith("x.yaml: model.overrides: ")
    assert spec_error(data).endswith(f"bytes of JSON, over the limit of {MAX_JSON_BYTES}")


def test_locations_and_strings_are_bounded() -> None:
    data = spec_dict()
    data["operators"][0]["locations"] = ["x"] * 10_001
    assert spec_error(data).startswith("x.yaml: operators[0].locations: list should have at most")
    data = spec_dict()
    data["operators"][0]["locations"] = ["x" * 1001]
    assert spec_error(data).startswith("x.yaml: operators[0].locations[0]: string should have")
    data = spec_dict()
    data["model"]["description"] = "nul \x00 inside"
    assert spec_error(data) == "x.yaml: model.description: must not hold a NUL character"


def test_a_yaml_infinity_in_a_free_form_field_is_refused() -> None:
    text = yaml.safe_dump(spec_dict()) + "provenance: {t: .inf}\n"
    with pytest.raises(SpecError, match=r"provenance: t: inf is not a finite number"):
        load_spec_text(text, "x.yaml")


def test_operators_at_the_limits_are_accepted() -> None:
    op = linear_op()
    op["args"]["note"] = "x" * MAX_JSON_STRING
    op["locations"] = [f"layer.{i}" for i in range(10_000)]
    parse_spec(spec_dict(operators=[op]), "x.yaml")
