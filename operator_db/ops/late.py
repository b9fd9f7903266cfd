"""Constructor arguments newer torches added: one key whichever torch harvested.

torch 2.13 gave the norms a keyword-only ``bias`` (default True); a GPU host's torch 2.11 has
none. A spec harvested with 2.13 that says ``bias: true`` would be refused by a 2.11 worker, and
the same BatchNorm2d harvested on the two would have two keys (the real H200 database of
``../shared/data/gpu/`` holds them without it). So a harvest leaves a late argument out at its
default, and a build on an older torch drops one its constructor does not take where it holds its
default.
"""

from __future__ import annotations

import functools
import inspect

import torch
from pydantic import JsonValue

from operator_db.ops.resolve import resolve_module

_LATE_NORMS = (
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "SyncBatchNorm",
    "GroupNorm",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "LazyInstanceNorm1d",
    "LazyInstanceNorm2d",
    "LazyInstanceNorm3d",
)

LATE_ARGUMENTS: dict[str, dict[str, JsonValue]] = {
    f"torch.nn.{name}": {"bias": True} for name in _LATE_NORMS
}
"""Per module class, the constructor arguments newer torches added, with their defaults."""


class LateArgumentError(ValueError):
    """A late argument at another value than its default, on a torch without it."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name}: {problem}")
        self.name = name
        self.problem = problem


@functools.cache
def _accepts(op: str) -> frozenset[str] | None:
    """Return the names this torch's constructor of ``op`` takes (None: any, ``**kwargs``)."""
    try:
        params = inspect.signature(resolve_module(op).__init__).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params)


def is_late_default(op: str, name: str, value: object) -> bool:
    """Whether ``name`` is a late argument of ``op`` holding its default (a harvest omits it)."""
    late = LATE_ARGUMENTS.get(op, {})
    return name in late and value == late[name] and type(value) is type(late[name])


def local_args(op: str, args: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """Return ``args`` for this torch's constructor of ``op``.

    The late arguments it does not take are dropped where they hold their default.

    Raises:
        LateArgumentError: a late argument this torch does not take, at another value.
    """
    late = LATE_ARGUMENTS.get(op)
    if not late or not any(name in args for name in late):
        return args
    accepted = _accepts(op)
    kept = dict(args)
    for name in late:
        if name not in args or accepted is None or name in accepted:
            continue
        if not is_late_default(op, name, args[name]):
            raise LateArgumentError(
                name,
                f"is not an argument of this torch's constructor (torch {torch.__version__}); "
                "a value other than its default needs a newer torch",
            )
        del kept[name]
    return kept
