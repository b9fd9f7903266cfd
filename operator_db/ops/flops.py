"""FLOPs and compulsory bytes of an operator configuration (METHODOLOGY §5): FLOPs, never MACs.

An op is run (on the meta device: shapes only, no arithmetic) under two dispatch modes at once:
``torch.utils.flop_counter.FlopCounterMode``, which counts matrix products, convolutions and fused
attention at 2·m·n·k, and a mode of ours that sees every ATen op that runs and applies a formula
to those FlopCounterMode gives 0. One rule counts an op's FLOPs:

- If FlopCounterMode counts anything, the op's FLOPs are its count alone, and the rule names what
  it counted: ``matmul`` (mm, addmm, bmm, baddbmm, _scaled_mm), ``convolution``, ``attention``
  (fused SDPA kernels), ``+``-joined when several. What it leaves out (a Linear's bias add, the
  softmax inside attention) is left out here too, so Σ count × flops over the ops with such a rule
  is exactly what FlopCounterMode counts for the model (:func:`counted_by_flop_counter`).
  Corrected: a grouped convolution's backward (``ops/flop_fixes.py``; torch over-counts it).
- Otherwise our formulas, per ATen op (``+``-joined categories when several):

  =================  ============================================================================
  ``elementwise``    1 per output element: every op tagged ``pointwise`` (arithmetic, comparisons,
                     activations, ``where``, ``masked_fill``, their backward ops), dropout, and
                     scatter-adds (per source element)
  ``softmax``        5 per element (max, subtract, exp, sum, divide); backward 3
  ``normalization``  5 per element when statistics are computed (layer/group norm, training batch
                     norm: mean, centre, square, sum, scale), 3 for RMS norm, 2 for batch norm
                     with running statistics, +1 each for an affine weight and bias; backward 8
  ``reduction``      1 per input element (sum, mean, max, cumsum, norm, ...); 3 for var/std
  ``pooling``        output elements × window size (max/avg pooling); 1 per input element for
                     adaptive pooling; backward 1 per gradient element
  ``interpolation``  2·taps − 1 per output element: 2^d taps for (bi/tri)linear, 16 for bicubic;
                     nearest moves data only
  ``matvec``         2·m·n for mv/addmv, 2·n for dot (FlopCounterMode skips them)
  ``none``           no arithmetic: views, copies, casts, concatenation, indexing, embedding,
                     padding, factories
  =================  ============================================================================

Bytes are compulsory traffic: every input, parameter, buffer and output touched once (numel ×
element size); an op that only makes views or touches nothing (``view``) moves 0 bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from operator_db.ops.flop_fixes import conv_backward_flops

COUNTER_RULES = frozenset({"matmul", "convolution", "attention", "flop_counter"})
"""Rule names that mean: FlopCounterMode counted these FLOPs."""

_MATMUL = frozenset({"mm", "addmm", "bmm", "baddbmm", "_scaled_mm"})


def counted_by_flop_counter(rule: str | None) -> bool:
    """Whether an op's FLOPs under ``rule`` are FlopCounterMode's count (not our formulas')."""
    return rule is not None and all(part in COUNTER_RULES for part in rule.split("+"))


def _counter_part(packet_name: str) -> str:
    if packet_name in _MATMUL:
        return "matmul"
    if "conv" in packet_name:
        return "convolution"
    if "attention" in packet_name:
        return "attention"
    return "flop_counter"


def _numel(value: Any) -> int:
    return value.numel() if isinstance(value, torch.Tensor) else 0


def _first_tensor(value: Any) -> torch.Tensor | None:
    for item in tree_flatten(value)[0]:
        if isinstance(item, torch.Tensor):
            return item
    return None


def _present(args: Sequence[Any], *positions: int) -> int:
    return sum(1 for p in positions if p < len(args) and isinstance(args[p], torch.Tensor))


def _training_flag(args: Sequence[Any]) -> bool:
    return next((a for a in args if isinstance(a, bool)), False)


# Normalization: name -> (per-element cost without affine, positions of weight and bias).
_NORM_STATS = {
    "native_layer_norm": (5, (2, 3)),
    "native_group_norm": (5, (1, 2)),
    "_batch_norm_with_update": (5, (1, 2)),
    "_batch_norm_with_update_functional": (5, (1, 2)),
    "_native_batch_norm_legit_no_training": (2, (1, 2)),
    "_batch_norm_no_update": (2, (1, 2)),
    "_fused_rms_norm": (3, (2,)),
}
_NORM_TRAINING_FLAG = frozenset(
    {
        "native_batch_norm",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_functional",
        "cudnn_batch_norm",
        "miopen_batch_norm",
    }
)
_NORM_BACKWARD = frozenset(
    {
        "native_layer_norm_backward",
        "native_group_norm_backward",
        "native_batch_norm_backward",
        "batch_norm_backward",
        "cudnn_batch_norm_backward",
        "miopen_batch_norm_backward",
        "_fused_rms_norm_backward",
    }
)
_SOFTMAX = frozenset({"_softmax", "_log_softmax", "_safe_softmax"})
_SOFTMAX_BACKWARD = frozenset({"_softmax_backward_data", "_log_softmax_backward_data"})
_REDUCTIONS = frozenset(
    {
        "sum",
        "mean",
        "amax",
        "amin",
        "max",
        "min",
        "argmax",
        "argmin",
        "prod",
        "logsumexp",
        "norm",
        "linalg_vector_norm",
        "cumsum",
        "cumprod",
        "all",
        "any",
        "nansum",
        "aminmax",
        "logcumsumexp",
    }
)
_VARIANCE = frozenset({"var", "std", "var_mean", "std_mean"})
_SCATTER_ADD = frozenset(
    {"embedding_dense_backward", "index_add", "scatter_add", "scatter_reduce", "index_reduce"}
)
_NOT_ARITHMETIC_POINTWISE = frozenset(
    {
        "clone",
        "_to_copy",
        "copy",
        "copy_",
        "fill",
        "fill_",
        "zero_",
        "zeros_like",
        "ones_like",
        "full_like",
        "empty_like",
        "rand_like",
        "randn_like",
        "randint_like",
        "bernoulli",
        "bernoulli_",
        "lift_fresh_copy",
        "detach_copy",
        "alias_copy",
        "_conj",
        "_neg_view",
    }
)
_VIEWS = frozenset(
    {
        "_unsafe_view",
        "_reshape_alias",
        "alias",
        "detach",
        "lift_fresh",
        "as_strided",
        "view_as_real",
        "view_as_complex",
        "_conj",
        "_neg_view",
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
    }
)
"""Ops that touch no data: views, and allocations that write nothing."""
_METADATA = frozenset(
    {
        "size",
        "sym_size",
        "stride",
        "sym_stride",
        "storage_offset",
        "sym_storage_offset",
        "numel",
        "sym_numel",
        "dim",
        "is_contiguous",
        "sym_is_contiguous",
        "is_strides_like_format",
        "is_non_overlapping_and_dense",
        "layout",
        "device",
        "_local_scalar_dense",
        "is_same_size",
        "_has_compatible_shallow_copy_type",
        "is_nonzero",
    }
)
_NO_ARITHMETIC = frozenset(
    {
        "cat",
        "stack",
        "embedding",
        "index",
        "index_select",
        "gather",
        "scatter",
        "index_put",
        "index_put_",
        "_index_put_impl_",
        "_unsafe_index",
        "_unsafe_index_put",
        "constant_pad_nd",
        "reflection_pad1d",
        "reflection_pad2d",
        "reflection_pad3d",
        "replication_pad1d",
        "replication_pad2d",
        "replication_pad3d",
        "repeat",
        "repeat_interleave",
        "tile",
        "flip",
        "roll",
        "tril",
        "triu",
        "masked_select",
        "nonzero",
        "sort",
        "argsort",
        "topk",
        "arange",
        "zeros",
        "ones",
        "full",
        "empty",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "new_zeros",
        "new_ones",
        "new_full",
        "scalar_tensor",
        "linspace",
        "logspace",
        "rand",
        "randn",
        "randint",
        "randperm",
        "normal",
        "normal_",
        "uniform_",
        "random_",
        "exponential_",
        "multinomial",
        "pixel_shuffle",
        "pixel_unshuffle",
        "channel_shuffle",
        "im2col",
        "col2im",
        "unfold",
        "slice_scatter",
        "select_scatter",
        "diagonal_scatter",
        "as_strided_scatter",
        "masked_scatter",
        "index_fill",
        "index_copy",
        "one_hot",
        "unique",
        "_unique2",
        "tril_indices",
        "triu_indices",
        "bucketize",
        "searchsorted",
        "resize_",
        "set_",
        "_pin_memory",
        "eye",
        "upsample_nearest1d",
        "upsample_nearest2d",
        "upsample_nearest3d",
        "_upsample_nearest_exact1d",
        "_upsample_nearest_exact2d",
        "_upsample_nearest_exact3d",
        "native_dropout_backward",
        "select_backward",
        "slice_backward",
        "diagonal_backward",
        "unfold_backward",
        "as_strided_backward",
        "index_select_backward",
        "constant_pad_nd_backward",
    }
)
_INTERPOLATION = {
    "upsample_linear1d": 2,
    "upsample_bilinear2d": 4,
    "upsample_trilinear3d": 8,
    "_upsample_bilinear2d_aa": 4,
    "upsample_bicubic2d": 16,
    "_upsample_bicubic2d_aa": 16,
}
"""Taps (input elements weighted) per output element of each interpolation."""


def _pool_window(name: str, args: Sequence[Any]) -> int:
    spatial = int(name[name.index("pool") + 4]) if name[name.index("pool") + 4].isdigit() else 2
    kernel = args[1] if len(args) > 1 else 1
    sizes = list(kernel) if isinstance(kernel, list | tuple) else [int(kernel)]
    if len(sizes) == 1:
        sizes = sizes * spatial
    return math.prod(int(k) for k in sizes)


def formula_flops(
    name: str, func: torch._ops.OpOverload, args: Sequence[Any], out: Any
) -> tuple[str, int] | None:
    """Return (category, FLOPs) of one ATen op by our formulas, or None if it is not classified.

    ``name`` is the op's overload packet name (``native_layer_norm``), ``args`` its positional
    arguments and ``out`` its result.
    """
    first = _first_tensor(out)
    out_numel = _numel(first)
    in_numel = _numel(args[0]) if args else 0
    tags = func.tags
    if name in _NORM_STATS:
        base, affine = _NORM_STATS[name]
        return "normalization", out_numel * (base + _present(args, *affine))
    if name in _NORM_TRAINING_FLAG:
        base = 5 if _training_flag(args) else 2
        return "normalization", out_numel * (base + _present(args, 1, 2))
    if name in _NORM_BACKWARD:
        return "normalization", 8 * _numel(args[0])
    if name in _SOFTMAX:
        return "softmax", 5 * out_numel
    if name in _SOFTMAX_BACKWARD:
        return "softmax", 3 * out_numel
    if "pool" in name:
        if name.endswith("backward"):
            return "pooling", out_numel
        if "adaptive" in name:
            return "pooling", in_numel
        return "pooling", out_numel * _pool_window(name, args)
    stem = name.removesuffix("_backward")
    if stem in _INTERPOLATION:
        taps = _INTERPOLATION[stem]
        grad_or_out = _numel(args[0]) if name.endswith("_backward") else out_numel
        return "interpolation", (2 * taps - 1) * grad_or_out
    if name in ("mv", "addmv"):
        matrix = args[0] if name == "mv" else args[1]
        return "matvec", 2 * _numel(matrix)
    if name in ("dot", "vdot"):
        return "matvec", 2 * in_numel
    if name in _NOT_ARITHMETIC_POINTWISE or name in _NO_ARITHMETIC:
        return "none", 0
    if torch.Tag.pointwise in tags or name in ("native_dropout", "addcmul", "addcdiv", "lerp"):
        return "elementwise", out_numel
    if name in _SCATTER_ADD:  # one add per source element; the source is args[3] but for embedding
        source = (
            args[0] if name == "embedding_dense_backward" else (args[3] if len(args) > 3 else None)
        )
        return "elementwise", _numel(source)
    if name in _VARIANCE:
        return "reduction", 3 * in_numel
    if name in _REDUCTIONS or torch.Tag.reduction in tags:
        return "reduction", in_numel
    if torch.Tag.view_copy in tags or name.endswith("_copy"):
        return "none", 0
    return None


@dataclass
class Tally:
    """What ran inside a :class:`FlopTally`: FlopCounterMode's count and our formulas' count."""

    counted: int = 0
    """FLOPs FlopCounterMode counted."""
    counted_parts: set[str] = field(default_factory=set)
    formula: int = 0
    """FLOPs our formulas counted for the ATen ops FlopCounterMode does not count."""
    formula_parts: set[str] = field(default_factory=set)
    moves_data: bool = False
    """Whether any op other than a view or a metadata query ran."""
    unclassified: set[str] = field(default_factory=set)
    """ATen ops no rule knows; counted as 0 FLOPs."""

    @property
    def flops(self) -> int:
        """The op's FLOPs: FlopCounterMode's count when it counted anything, else our formulas'."""
        return self.counted if self.counted else self.formula

    @property
    def rule(self) -> str:
        """The rule that counted :attr:`flops` (see the module documentation)."""
        if self.counted:
            return "+".join(sorted(self.counted_parts))
        parts = sorted(p for p in self.formula_parts if p != "none")
        return "+".join(parts) if parts and self.formula else "none"


class _FormulaMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Sees every ATen op FlopCounterMode passes down and applies our formulas."""

    def __init__(self, tally: Tally, counted: frozenset[Any]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.tally = tally
        self.counted = counted

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        packet = func._overloadpacket
        name = packet.__name__
        if name in _METADATA:
            return out
        if func.is_view or name in _VIEWS or torch.Tag.inplace_view in func.tags:
            return out
        self.tally.moves_data = True
        if packet in self.counted:
            return out
        classified = formula_flops(name, func, args, out)
        if classified is None:
            self.tally.unclassified.add(f"aten.{name}")
            return out
        category, flops = classified
        self.tally.formula_parts.add(category)
        self.tally.formula += flops
        return out


class FlopTally:
    """Context manager: count the FLOPs of what runs inside, FlopCounterMode first (see module).

    >>> with FlopTally() as tally:
    ...     torch.nn.functional.gelu(torch.empty(4, 8, device="meta"))
    >>> tally.result.flops, tally.result.rule
    (32, 'elementwise')
    """

    def __init__(self) -> None:
        self.result = Tally()
        self._counter = FlopCounterMode(
            display=False,
            custom_mapping={torch.ops.aten.convolution_backward: conv_backward_flops},
        )
        self._formula = _FormulaMode(self.result, frozenset(self._counter.flop_registry))

    def __enter__(self) -> FlopTally:
        # Ours below FlopCounterMode: it decomposes what it does not count before we see it, so both
        # see the same ATen ops.
        self._formula.__enter__()  # type: ignore[no-untyped-call]
        try:
            self._counter.__enter__()  # type: ignore[no-untyped-call]
        except BaseException:
            self._formula.__exit__(None, None, None)  # type: ignore[no-untyped-call]
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._counter.__exit__(exc_type, exc, tb)  # type: ignore[no-untyped-call]
        finally:
            self._formula.__exit__(exc_type, exc, tb)  # type: ignore[no-untyped-call]
        for packet, flops in self._counter.get_flop_counts().get("Global", {}).items():
            if flops:
                self.result.counted += int(flops)
                self.result.counted_parts.add(_counter_part(packet.__name__))
