"""Sweeps: grids of configurations of one operator type, as a spec (``opdb sweep OP``).

The database holds the configurations of the models someone harvested; a predictor needs more of
each type than that. A sweep is the cross product of a few values per dimension (Conv2d over
channels, kernel, stride, spatial size and batch; Linear and matmul over m, n, k; attention over
batch, heads, sequence and head size; normalization and elementwise over sizes), each
configuration counted like a harvested one (:func:`operator_db.ops.cost.op_cost`: FLOPs, bytes,
outputs, parameters), so that it is stored, queued and measured like any other.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from operator_db.errors import InvalidInputError
from operator_db.ops.cost import op_cost
from operator_db.specs import SPEC_VERSION
from operator_db.specs.schema import CallSpec, ModelInfo, OperatorSpec, Spec, TensorSpec

Values = Mapping[str, Sequence[int]]


@dataclass(frozen=True)
class Sweep:
    """One operator type's grid: its dimensions, their default values, a point → a spec."""

    name: str
    description: str
    grid: Values
    """Default values per dimension (the cross product is swept)."""
    build: Callable[[Mapping[str, int]], OperatorSpec | None]
    """One point of the grid → its configuration (None: the point is not a valid one)."""


def _t(*shape: int) -> TensorSpec:
    return TensorSpec(shape=list(shape))


def _conv2d(p: Mapping[str, int]) -> OperatorSpec | None:
    k, s, size = p["kernel"], p["stride"], p["size"]
    if k > size:
        return None
    return OperatorSpec(
        op="torch.nn.Conv2d",
        form="module",
        args={
            "in_channels": p["channels"],
            "out_channels": p["channels"],
            "kernel_size": [k, k],
            "stride": [s, s],
            "padding": [k // 2, k // 2],
            "bias": False,
        },
        dtype="float32",
        inputs=[_t(p["batch"], p["channels"], size, size)],
    )


def _linear(p: Mapping[str, int]) -> OperatorSpec:
    return OperatorSpec(
        op="torch.nn.Linear",
        form="module",
        args={"in_features": p["k"], "out_features": p["n"], "bias": True},
        dtype="float32",
        inputs=[_t(p["m"], p["k"])],
    )


def _matmul(p: Mapping[str, int]) -> OperatorSpec:
    return OperatorSpec(
        op="torch.matmul",
        form="function",
        inputs=[_t(p["m"], p["k"]), _t(p["k"], p["n"])],
        call=CallSpec(args=[{"tensor": 0}, {"tensor": 1}]),
    )


def _attention(p: Mapping[str, int]) -> OperatorSpec:
    shape = (p["batch"], p["heads"], p["sequence"], p["head_size"])
    return OperatorSpec(
        op="torch.nn.functional.scaled_dot_product_attention",
        form="function",
        inputs=[_t(*shape), _t(*shape), _t(*shape)],
        call=CallSpec(args=[{"tensor": 0}, {"tensor": 1}, {"tensor": 2}]),
    )


def _layer_norm(p: Mapping[str, int]) -> OperatorSpec:
    return OperatorSpec(
        op="torch.nn.LayerNorm",
        form="module",
        args={"normalized_shape": [p["width"]]},
        dtype="float32",
        inputs=[_t(p["rows"], p["width"])],
    )


def _gelu(p: Mapping[str, int]) -> OperatorSpec:
    return OperatorSpec(
        op="torch.nn.functional.gelu",
        form="function",
        inputs=[_t(p["rows"], p["width"])],
        call=CallSpec(args=[{"tensor": 0}]),
    )


SWEEPS: dict[str, Sweep] = {
    s.name: s
    for s in (
        Sweep(
            "conv2d",
            "torch.nn.Conv2d, same channels in and out, 'same' padding",
            {
                "batch": [1, 8],
                "channels": [16, 64, 256],
                "kernel": [1, 3],
                "stride": [1, 2],
                "size": [14, 56],
            },
            _conv2d,
        ),
        Sweep(
            "linear",
            "torch.nn.Linear on an m × k input, k → n features",
            {"m": [1, 32, 512], "n": [256, 1024, 4096], "k": [256, 1024, 4096]},
            _linear,
        ),
        Sweep(
            "matmul",
            "torch.matmul of m × k by k × n",
            {"m": [64, 512, 2048], "n": [64, 512, 2048], "k": [64, 512, 2048]},
            _matmul,
        ),
        Sweep(
            "attention",
            "F.scaled_dot_product_attention, q = k = v of batch × heads × sequence × head size",
            {"batch": [1, 8], "heads": [4, 12], "sequence": [128, 512], "head_size": [64]},
            _attention,
        ),
        Sweep(
            "layer_norm",
            "torch.nn.LayerNorm over the last dimension of a rows × width input",
            {"rows": [128, 1024, 8192], "width": [256, 768, 2048]},
            _layer_norm,
        ),
        Sweep(
            "gelu",
            "F.gelu of a rows × width input (an elementwise op)",
            {"rows": [128, 1024, 8192], "width": [256, 768, 2048]},
            _gelu,
        ),
    )
}
"""The operator types a sweep knows (``opdb sweep --list``)."""


def parse_values(items: Sequence[str]) -> dict[str, list[int]]:
    """Parse ``dim=v1,v2`` overrides of a grid's values.

    Raises:
        InvalidInputError: not ``name=positive integers``.
    """
    found: dict[str, list[int]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            values = []
        if not sep or not name.strip() or not values or min(values) < 1:
            raise InvalidInputError(f"bad sweep value {item!r}: expected NAME=1,2,3 (positive)")
        found[name.strip()] = values
    return found


def grid_values(sweep: Sweep, overrides: Values | None = None) -> dict[str, list[int]]:
    """Return the grid's values per dimension, in order, ``overrides`` replacing the defaults.

    Raises:
        InvalidInputError: an override names a dimension the sweep does not have.
    """
    grid = {name: list(values) for name, values in sweep.grid.items()}
    for name, values in (overrides or {}).items():
        if name not in grid:
            raise InvalidInputError(
                f"sweep {sweep.name} has no dimension {name!r} (it has {', '.join(grid)})"
            )
        grid[name] = list(values)
    return grid


def points(sweep: Sweep, overrides: Values | None = None) -> Iterator[dict[str, int]]:
    """Yield the grid's points, its dimensions in order (see :func:`grid_values`)."""
    grid = grid_values(sweep, overrides)
    for combo in itertools.product(*grid.values()):
        yield dict(zip(grid, combo, strict=True))


def get_sweep(name: str) -> Sweep:
    """Return the named sweep.

    Raises:
        InvalidInputError: unknown (the message lists the known ones).
    """
    try:
        return SWEEPS[name]
    except KeyError:
        raise InvalidInputError(
            f"unknown sweep {name!r}: choose one of {', '.join(SWEEPS)}"
        ) from None


def sweep_spec(
    sweep: Sweep, overrides: Values | None = None, *, name: str | None = None, limit: int = 1000
) -> Spec:
    """Return the sweep's configurations as one spec, each counted (FLOPs, bytes, outputs).

    The spec's model has no reference (it cannot run whole): enqueueing it queues its
    configurations one by one.

    Raises:
        InvalidInputError: more than ``limit`` points, or a bad override.
    """
    values = grid_values(sweep, overrides)
    grid = list(points(sweep, values))
    if len(grid) > limit:
        raise InvalidInputError(
            f"sweep {sweep.name} has {len(grid)} points, over the limit of {limit}: fewer values"
        )
    operators: list[OperatorSpec] = []
    for point in grid:
        op = sweep.build(point)
        if op is None:
            continue
        cost = op_cost(op)
        operators.append(
            op.model_copy(
                update={
                    "outputs": cost.outputs,
                    "flops": cost.flops,
                    "flop_rule": cost.flop_rule,
                    "bytes": cost.bytes,
                    "params": cost.params,
                }
            )
        )
    dims = ", ".join(f"{k} {'/'.join(map(str, v))}" for k, v in values.items())
    return Spec(
        spec_version=SPEC_VERSION,
        model=ModelInfo(
            name=name or f"sweep-{sweep.name}",
            description=f"Sweep of {sweep.description}: {dims}.",
        ),
        operators=operators,
        provenance={"tool": "opdb sweep", "sweep": sweep.name},
    )
