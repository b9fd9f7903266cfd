"""The YAML spec schema (pydantic): a model, its inputs and its distinct operator configurations.

A spec is the contract between harvesting and measuring: the worker never needs the model, only the
operator configurations below. Every size is in elements, every FLOP count in FLOPs (never MACs),
every byte count in bytes.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    field_validator,
    model_validator,
)

from operator_db.specs.limits import (
    INT32_MAX,
    INT64_MAX,
    MAX_LOCATION_CHARS,
    MAX_LOCATIONS,
    Int64,
    JsonList,
    JsonObject,
)
from operator_db.specs.text import printable, printable_lines

SPEC_VERSION = 3
"""The spec format version this code writes. Version 3 added ``calls`` (the order of the calls);
version 2 renamed an operator's ``kind`` to ``form``. Older files are read and upgraded
(``operator_db.specs.io.upgrade_spec_data``); a spec without ``calls`` still loads and estimates."""

SUPPORTED_SPEC_VERSIONS = (1, 2, SPEC_VERSION)

MAX_SEQUENCE_CALLS = 1_000_000
"""Most calls a spec's call order lists; a harvest leaves the order out of a longer model."""

DType = Literal[
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "complex64",
    "complex128",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
]
"""Tensor element types, named as in ``torch`` without the ``torch.`` prefix."""

DTYPE_BYTES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "complex64": 8,
    "complex128": 16,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}
"""Size of one element of each dtype, in bytes."""

MAX_DIM = 2**31 - 1
"""Largest single dimension accepted, in elements."""
MAX_NUMEL = 2**40
"""Largest tensor the format accepts, in elements (an absurd shape is refused before anything
allocates); where specs come in, the lower ``OPDB_MAX_TENSOR_NUMEL`` applies (ops/admission.py)."""

Dim = Annotated[int, Field(gt=0, le=MAX_DIM)]
Count = Annotated[int, Field(ge=1, le=INT32_MAX)]
NonNegative = Annotated[int, Field(ge=0, le=INT64_MAX)]
OpName = Annotated[
    str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$", max_length=300)
]
ModelName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:+@-]*$", max_length=200)]


def _no_nul(value: object) -> object:
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("must not hold a NUL character")
    return value


# Free text of bounded length that PostgreSQL can store (no NUL character) and pages and
# terminals show as it is (printable characters only: specs/text.py).
ShortText = Annotated[
    str, Field(max_length=200), BeforeValidator(_no_nul), AfterValidator(printable)
]
RuleName = Annotated[
    str, Field(max_length=100), BeforeValidator(_no_nul), AfterValidator(printable)
]
Reference = Annotated[
    str, Field(max_length=500), BeforeValidator(_no_nul), AfterValidator(printable)
]
Location = Annotated[
    str,
    Field(max_length=MAX_LOCATION_CHARS),
    BeforeValidator(_no_nul),
    AfterValidator(printable),
]
Prose = Annotated[
    str, Field(max_length=2000), BeforeValidator(_no_nul), AfterValidator(printable_lines)
]
Mode = Literal["inference", "training"]
OpForm = Literal["module", "function", "opaque"]
"""How an operator is run: a ``module`` (a torch.nn leaf rebuilt from its constructor arguments),
a ``function`` (a functional call), or ``opaque`` (a leaf that cannot be rebuilt: not measured)."""


class _Strict(BaseModel):
    """Base for spec models: unknown fields are errors, types are not coerced."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TensorSpec(_Strict):
    """One tensor: its shape (elements per dimension) and element type."""

    shape: list[Dim] = Field(max_length=16)
    dtype: DType = "float32"
    name: ShortText | None = None
    value_range: tuple[Int64, Int64] | None = Field(
        default=None,
        description="For integer inputs, values are drawn from [low, high) (e.g. token ids).",
    )

    @field_validator("shape", mode="before")
    @classmethod
    def _shape_as_list(cls, value: object) -> object:
        # A torch.Size or tuple given from Python is a shape too; YAML gives lists.
        return list(value) if isinstance(value, tuple) else value

    @field_validator("value_range", mode="before")
    @classmethod
    def _range_as_tuple(cls, value: object) -> object:
        # YAML and JSON give [low, high] as a list; strict mode would refuse it for a tuple.
        return tuple(value) if isinstance(value, list) else value

    @field_validator("shape")
    @classmethod
    def _not_absurd(cls, shape: list[int]) -> list[int]:
        numel = math.prod(shape)
        if numel > MAX_NUMEL:
            raise ValueError(f"tensor of {numel} elements is larger than the limit of {MAX_NUMEL}")
        return shape

    @field_validator("value_range")
    @classmethod
    def _ordered(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is not None and value[0] >= value[1]:
            raise ValueError(f"low must be below high, got [{value[0]}, {value[1]}]")
        return value

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.numel * DTYPE_BYTES[self.dtype]


class CallSpec(_Strict):
    """How the op is called: positional and keyword arguments.

    Tensor arguments appear as ``{"tensor": i}``, a reference to ``inputs[i]``; everything else is a
    literal JSON value (numbers, strings, booleans, null, lists, mappings).
    """

    args: JsonList = Field(default_factory=list)
    kwargs: JsonObject = Field(default_factory=dict)


def tensor_refs(value: JsonValue) -> list[int]:
    """Return the input indices referenced (as ``{"tensor": i}``) anywhere inside ``value``."""
    if isinstance(value, dict):
        if set(value) == {"tensor"} and isinstance(value["tensor"], int):
            return [value["tensor"]]
        return [i for v in value.values() for i in tensor_refs(v)]
    if isinstance(value, list):
        return [i for v in value for i in tensor_refs(v)]
    return []


class OperatorSpec(_Strict):
    """One distinct operator configuration of a model and how often the model runs it."""

    op: OpName = Field(description="Dotted name: torch.nn.Conv2d, torch.nn.functional.relu, ...")
    form: OpForm = Field(description="module (rebuilt from args), function, or opaque.")
    args: JsonObject = Field(default_factory=dict, description="Constructor arguments of a module.")
    dtype: DType | None = Field(default=None, description="Parameter dtype of a module.")
    inputs: list[TensorSpec] = Field(default_factory=list, max_length=64)
    call: CallSpec | None = Field(
        default=None, description="Non-tensor arguments; None means the inputs, positionally."
    )
    outputs: list[TensorSpec] = Field(default_factory=list, max_length=64)
    count: Count = 1
    flops: NonNegative | None = Field(default=None, description="Forward FLOPs per call.")
    flops_backward: NonNegative | None = Field(
        default=None, description="Backward FLOPs per call (training specs)."
    )
    flop_rule: RuleName | None = None
    bytes: NonNegative | None = Field(
        default=None, description="Compulsory bytes per call: inputs, weights, outputs once."
    )
    params: NonNegative = Field(default=0, description="Parameter count (elements).")
    locations: list[Location] = Field(
        default_factory=list, max_length=MAX_LOCATIONS, description="Module names where it runs."
    )
    key: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")

    @model_validator(mode="after")
    def _refs_in_range(self) -> OperatorSpec:
        if self.call is None:
            return self
        n = len(self.inputs)
        refs = tensor_refs(self.call.args) + tensor_refs(dict(self.call.kwargs))
        for ref in refs:
            if not 0 <= ref < n:
                raise ValueError(f"call refers to tensor {ref} but there are {n} inputs")
        return self


class ModelInfo(_Strict):
    """The model a spec describes and how it was fed."""

    name: ModelName
    reference: Reference | None = Field(
        default=None,
        description="torchvision:NAME, timm:NAME, transformers:CLASS, module:pkg.mod:factory",
    )
    overrides: JsonObject = Field(
        default_factory=dict, description="Constructor or config overrides for the reference."
    )
    mode: Mode = "inference"
    dtype: DType = "float32"
    batch_size: Count | None = None
    inputs: list[TensorSpec] = Field(default_factory=list, max_length=64)
    description: Prose | None = None


class Spec(_Strict):
    """A whole YAML spec file."""

    spec_version: int = Field(json_schema_extra={"enum": list(SUPPORTED_SPEC_VERSIONS)})
    model: ModelInfo
    operators: list[OperatorSpec] = Field(min_length=1, max_length=100_000)
    provenance: JsonObject = Field(
        default_factory=dict, description="Who harvested it, with which versions, when."
    )
    processed: bool = Field(
        default=False, description="Set once the spec has been ingested; not part of its content."
    )
    calls: list[Annotated[int, Field(ge=0, le=INT32_MAX)]] | None = Field(
        default=None,
        max_length=MAX_SEQUENCE_CALLS,
        description="The model's calls in the order it makes them, as indices into operators "
        "(each operator appears count times); None where the harvest did not record it.",
    )
    syncs: list[Annotated[int, Field(ge=0, le=MAX_SEQUENCE_CALLS)]] | None = Field(
        default=None,
        max_length=MAX_SEQUENCE_CALLS,
        description="Positions in calls before which the model makes the host wait for the "
        "device (.item(), if mask.any():, nonzero); len(calls) is after the last call.",
    )

    @field_validator("spec_version")
    @classmethod
    def _known_version(cls, version: int) -> int:
        if version not in SUPPORTED_SPEC_VERSIONS:
            known = ", ".join(str(v) for v in SUPPORTED_SPEC_VERSIONS)
            raise ValueError(f"unknown spec_version {version}; this operator-db reads {known}")
        return version

    @model_validator(mode="after")
    def _totals_fit(self) -> Spec:
        # The database sums count × FLOPs (bytes, parameters) per model in 64-bit integers.
        for name in ("flops", "flops_backward", "bytes", "params"):
            total = sum(op.count * (getattr(op, name) or 0) for op in self.operators)
            if total > INT64_MAX:
                raise ValueError(
                    f"the model's {name} (count × {name}, summed over operators) is {total}, "
                    "over 2**63 - 1"
                )
        calls = sum(op.count for op in self.operators)
        if calls > INT64_MAX:
            raise ValueError(f"the model's calls (counts summed) are {calls}, over 2**63 - 1")
        if self.calls is not None:
            _check_order(self.calls, [op.count for op in self.operators])
        if self.syncs is not None:
            if self.calls is None:
                raise ValueError("syncs are positions in calls, and there are no calls")
            for i, position in enumerate(self.syncs):
                if position > len(self.calls) or (i and position <= self.syncs[i - 1]):
                    raise ValueError(
                        f"syncs[{i}] is {position}: syncs are increasing positions from 0 to "
                        f"{len(self.calls)} (the number of calls)"
                    )
        return self


def _check_order(order: list[int], counts: list[int]) -> None:
    """Check that a call order names each operator ``count`` times and nothing else.

    Raises:
        ValueError: an index out of range, or an operator called another number of times.
    """
    seen = [0] * len(counts)
    for position, index in enumerate(order):
        if index >= len(counts):
            raise ValueError(
                f"calls[{position}] is operator {index}, but there are {len(counts)} operators"
            )
        seen[index] += 1
    for index, (found, count) in enumerate(zip(seen, counts, strict=True)):
        if found != count:
            raise ValueError(
                f"calls name operators[{index}] {found} times, but its count is {count}"
            )
