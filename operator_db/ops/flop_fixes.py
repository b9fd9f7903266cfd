"""Corrections to ``torch.utils.flop_counter``'s formulas, handed to ``FlopCounterMode``.

``FlopTally`` (``ops/flops.py``) passes these as ``custom_mapping``: each replaces torch's formula
for its ATen op, taking the same arguments (shapes, as torch's ``shape_wrapper`` gives them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch.utils.flop_counter import conv_flop_count


def conv_backward_flops(
    grad_out_shape: Sequence[int],
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    _bias: object,
    _stride: object,
    _padding: object,
    _dilation: object,
    transposed: bool,
    _output_padding: object,
    _groups: int,
    output_mask: Sequence[bool],
    out_shape: object = None,
    **_kwargs: Any,
) -> int:
    """FLOPs of ``aten.convolution_backward`` from shapes: the forward's, once per gradient asked.

    The input's gradient is a transposed convolution of the output's gradient with the weight, the
    weight's a convolution of the input with the output's gradient; each multiplies the same
    pairs of elements as the forward (``conv_flop_count``, whose weight shape already holds
    ``in_channels / groups``), so a grouped convolution's count stays grouped.
    """
    forward = conv_flop_count(list(x_shape), list(w_shape), list(grad_out_shape), transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))
