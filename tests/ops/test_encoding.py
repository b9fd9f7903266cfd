from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from operator_db.ops.encoding import (
    EncodingError,
    decode_value,
    dtype_from_name,
    encode_value,
    input_strides,
)

META = torch.device("meta")


def _no_tensor(t: torch.Tensor) -> Any:
    raise AssertionError("no tensor expected")


def _roundtrip(value: Any, *, index: bool = False) -> Any:
    encoded = encode_value(value, _no_tensor, index=index)
    return encoded, decode_value(encoded, lambda i: torch.empty(0), META)


@pytest.mark.parametrize(
    ("value", "encoded", "decoded"),
    [
        (None, None, None),
        (True, True, True),
        (3, 3, 3),
        (0.5, 0.5, 0.5),
        ("same", "same", "same"),
        ((1, 2), [1, 2], (1, 2)),
        ([1, 2], [1, 2], (1, 2)),
        (torch.Size([2, 3]), [2, 3], (2, 3)),
        (slice(None, 4, 2), {"slice": [None, 4, 2]}, slice(None, 4, 2)),
        (Ellipsis, {"ellipsis": True}, Ellipsis),
        (float("inf"), {"float": "inf"}, float("inf")),
        (-math.inf, {"float": "-inf"}, -math.inf),
        (1 + 2j, {"complex": [1.0, 2.0]}, 1 + 2j),
        (torch.bfloat16, {"dtype": "bfloat16"}, torch.bfloat16),
        (torch.channels_last, {"memory_format": "channels_last"}, torch.channels_last),
        (torch.strided, {"layout": "strided"}, torch.strided),
        ({"a": (1, 2)}, {"dict": {"a": [1, 2]}}, {"a": (1, 2)}),
    ],
)
def test_values_encode_as_documented_and_decode_back(
    value: Any, encoded: Any, decoded: Any
) -> None:
    got_encoded, got_decoded = _roundtrip(value)
    assert got_encoded == encoded
    assert got_decoded == decoded
    assert type(got_decoded) is type(decoded)


def test_nan_is_written_as_a_marker() -> None:
    encoded, decoded = _roundtrip(float("nan"))
    assert encoded == {"float": "nan"}
    assert math.isnan(decoded)


def test_a_device_is_never_recorded_and_decodes_to_the_target() -> None:
    encoded = encode_value(torch.device("cpu"), _no_tensor)
    assert encoded == {"device": "target"}
    assert decode_value(encoded, lambda i: torch.empty(0), META) == META


def test_lists_stay_lists_only_inside_an_index() -> None:
    index = (slice(None), [0, 2])
    encoded, decoded = _roundtrip(index, index=True)
    assert encoded == [{"slice": [None, None, None]}, {"list": [0, 2]}]
    assert decoded == (slice(None), [0, 2])
    assert isinstance(decoded[1], list)
    x = torch.arange(12).view(3, 4)
    assert torch.equal(x[decoded], x[index])


def test_tensors_become_references_and_strided_wrappers() -> None:
    a = torch.zeros(2, 3)
    b = a.t()
    seen: list[torch.Tensor] = []

    def ref(t: torch.Tensor) -> Any:
        seen.append(t)
        i = len(seen) - 1
        if not t.is_contiguous():
            return {"strided": {"tensor": i}, "stride": list(t.stride())}
        return {"tensor": i}

    encoded = encode_value([a, b], ref)
    assert encoded == [{"tensor": 0}, {"strided": {"tensor": 1}, "stride": [1, 3]}]
    assert input_strides(encoded) == {1: [1, 3]}
    inputs = [torch.ones(2, 3), torch.ones(3, 2)]
    assert decode_value(encoded, inputs.__getitem__, META) == (inputs[0], inputs[1])


@pytest.mark.parametrize("value", [object(), torch.Generator(), {1: 2}, print])
def test_values_without_a_json_form_are_refused(value: Any) -> None:
    with pytest.raises(EncodingError):
        encode_value(value, _no_tensor)


@pytest.mark.parametrize(
    "encoded",
    [
        {"nope": 1},
        {"a": 1, "b": 2},
        {"tensor": "x"},
        {"slice": [1]},
        {"dtype": "float99"},
        {"float": "huge"},
        {"memory_format": "diagonal"},
    ],
)
def test_malformed_encodings_are_refused(encoded: Any) -> None:
    with pytest.raises(EncodingError):
        decode_value(encoded, lambda i: torch.empty(0), META)


def test_dtype_names_resolve_only_to_dtypes() -> None:
    assert dtype_from_name("float16") is torch.float16
    with pytest.raises(EncodingError, match="unknown dtype 'nn'"):
        dtype_from_name("nn")
