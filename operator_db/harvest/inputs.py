"""Model inputs: the ``--input`` syntax, batch sizes, and tensors for a meta or CPU run.

``--input`` text is ``[NAME=]D1xD2x...[:DTYPE][:LOW..HIGH]``:

- ``1x3x224x224``: a float tensor (the model's dtype), passed positionally;
- ``input_ids=1x128:int64:0..30522``: a keyword input of int64 values drawn from [0, 30522);
- several ``--input`` options are passed in order (positional first, then keywords).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

import torch
from pydantic import ValidationError

from operator_db.errors import HarvestError
from operator_db.ops.build import allocate
from operator_db.ops.encoding import dtype_from_name, dtype_name
from operator_db.specs.schema import DType, TensorSpec

_SYNTAX = "[NAME=]1x3x224x224[:DTYPE][:LOW..HIGH]"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")
DTYPES: tuple[str, ...] = get_args(DType)


def parse_input(text: str) -> TensorSpec:
    """Parse one ``--input`` value (see the module documentation).

    Raises:
        HarvestError: one line saying what is wrong and the expected syntax.
    """

    def bad(problem: str) -> HarvestError:
        return HarvestError(f"bad input {text!r}: {problem} (expected {_SYNTAX})")

    name: str | None = None
    body = text.strip()
    if "=" in body:
        name, _, body = body.partition("=")
        if not _NAME.match(name):
            raise bad(f"{name!r} is not an argument name")
    shape_text, *rest = body.split(":")
    try:
        shape = [int(d) for d in shape_text.lower().split("x")]
    except ValueError:
        raise bad(f"{shape_text!r} is not a shape of integers joined by 'x'") from None
    if any(d <= 0 for d in shape):
        raise bad("every dimension must be positive")
    dtype: str | None = None
    value_range: tuple[int, int] | None = None
    for part in rest:
        match = _RANGE.match(part)
        if match:
            value_range = (int(match[1]), int(match[2]))
        elif part in DTYPES:
            dtype = part
        else:
            raise bad(f"{part!r} is neither a dtype ({', '.join(DTYPES)}) nor a range LOW..HIGH")
    try:
        return TensorSpec.model_validate(
            {"shape": shape, "dtype": dtype or "float32", "name": name, "value_range": value_range}
        )
    except ValidationError as exc:
        raise bad(exc.errors()[0]["msg"]) from None


def parse_batch_sizes(text: str | None) -> list[int] | None:
    """Parse ``1,8,32`` into batch sizes (None when not given).

    Raises:
        HarvestError: not a comma-separated list of positive integers.
    """
    if text is None or not text.strip():
        return None
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise HarvestError(
            f"bad batch sizes {text!r}: expected positive integers like 1,8,32"
        ) from None
    if not sizes or any(s <= 0 for s in sizes):
        raise HarvestError(f"bad batch sizes {text!r}: expected positive integers like 1,8,32")
    return list(dict.fromkeys(sizes))


def with_batch(inputs: Sequence[TensorSpec], batch: int) -> list[TensorSpec]:
    """Return the inputs with their first dimension set to ``batch`` (0-d inputs unchanged)."""
    return [t.model_copy(update={"shape": [batch, *t.shape[1:]]}) if t.shape else t for t in inputs]


@dataclass
class ModelInputs:
    """A model's example inputs, split as they are passed: positionally, then by keyword.

    Values are tensors (any device), :class:`TensorSpec` (allocated per run) or other Python
    values passed through unchanged (``return_dict=False``).
    """

    args: list[Any]
    kwargs: dict[str, Any]

    @classmethod
    def of(cls, value: Any) -> ModelInputs:
        """Normalise a tensor, a spec, a sequence (positional) or a mapping (keyword inputs)."""
        if isinstance(value, ModelInputs):
            return value
        if value is None:
            return cls([], {})
        if isinstance(value, torch.Tensor | TensorSpec):
            return cls([value], {})
        if isinstance(value, Mapping):
            return cls([], dict(value))
        if isinstance(value, Sequence) and not isinstance(value, str):
            named = [v for v in value if isinstance(v, TensorSpec) and v.name]
            if named:  # named specs are keyword inputs, as --input NAME=... on the command line
                return cls(
                    [v for v in value if not (isinstance(v, TensorSpec) and v.name)],
                    {v.name: v for v in named if v.name},
                )
            return cls(list(value), {})
        raise HarvestError(
            f"example inputs must be tensors, specs, a sequence or a mapping, "
            f"got {type(value).__name__}"
        )

    def specs(self, dtype: torch.dtype | None) -> list[TensorSpec]:
        """Describe every tensor input (named by keyword, else positionally) for the spec."""
        found: list[TensorSpec] = []
        items = [(None, v) for v in self.args] + list(self.kwargs.items())
        for name, value in items:
            if isinstance(value, TensorSpec):
                spec = (
                    value
                    if name is None or value.name == name
                    else value.model_copy(update={"name": name})
                )
                if dtype is not None and spec.dtype.startswith(("float", "bfloat")):
                    spec = spec.model_copy(update={"dtype": dtype_name(dtype)})
                found.append(spec)
            elif isinstance(value, torch.Tensor):
                target = dtype if dtype is not None and value.is_floating_point() else value.dtype
                try:
                    found.append(
                        TensorSpec(
                            shape=list(value.shape),
                            dtype=dtype_name(target),  # type: ignore[arg-type]
                            name=name,
                        )
                    )
                except ValidationError as exc:
                    raise HarvestError(
                        f"input {name or len(found)}: {exc.errors()[0]['msg']}"
                    ) from None
        return found

    def materialize(
        self, device: torch.device, dtype: torch.dtype | None, seed: int = 0
    ) -> tuple[list[Any], dict[str, Any]]:
        """Return the arguments as tensors on ``device``; floating inputs in ``dtype`` if given.

        On the meta device nothing is allocated. On the CPU, specs are drawn (normal floats,
        integers in their ``value_range`` or [0, 2)); real tensors are moved, not redrawn.
        """
        generator = None
        if device.type != "meta":
            generator = torch.Generator(device=device)
            generator.manual_seed(seed)

        def convert(value: Any) -> Any:
            if isinstance(value, TensorSpec):
                return allocate(value, device=device, dtype=dtype, generator=generator)
            if isinstance(value, torch.Tensor):
                if value.device.type == "meta" and device.type != "meta":
                    spec = TensorSpec(shape=list(value.shape), dtype=dtype_name(value.dtype))  # type: ignore[arg-type]
                    return allocate(spec, device=device, dtype=dtype, generator=generator)
                target = dtype if dtype is not None and value.is_floating_point() else value.dtype
                return value.to(device=device, dtype=target)
            return value

        return [convert(v) for v in self.args], {k: convert(v) for k, v in self.kwargs.items()}


def parse_dtype(text: str | None) -> torch.dtype | None:
    """Parse a ``--dtype`` value (``float32``, ``bfloat16``, ...).

    Raises:
        HarvestError: not a floating-point dtype name.
    """
    if text is None:
        return None
    floats = [d for d in DTYPES if d.startswith(("float", "bfloat"))]
    if text not in floats:
        raise HarvestError(f"bad dtype {text!r}: expected one of {', '.join(floats)}")
    return dtype_from_name(text)
