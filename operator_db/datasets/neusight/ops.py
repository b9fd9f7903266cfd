"""NeuSight's operator families as operator-db configurations: the mapping table, and their cost.

Each NeuSight ``OPName`` names one PyTorch call (its collection code, ``neusight/Dataset``); a
family's builder returns the configuration ``opdb harvest`` records for the same call
(``tests/datasets/test_neusight_keys.py`` harvests a module making each call and compares keys),
with its cost in closed form: the same FLOPs, bytes, parameters and outputs as
``ops.cost.op_cost`` (checked against it in the same tests) at a few microseconds instead of a
few milliseconds a configuration, for some 57,000 configurations.

All fp32. Shapes: bmm ``B, M, N, K``; linear ``B, M, N, K`` (``B`` = 1: ``nn.Linear(N, K)`` on
``(B, M, N)``); the vector families ``B, H``; conv ``B, Input_Channel, Output_Channel,
Kernel_Szie, Input_Size, Stride, Padding``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from operator_db.specs.schema import CallSpec, OperatorSpec, TensorSpec

F32 = 4
"""Bytes per float32 element."""
SCALAR = 0.3
"""The scalar of ``addu``, ``mulu``, ``powu`` and ``divu`` in their configurations. NeuSight
drew it per shape (``1 - random.random()``, in (0, 1]) and did not record it; its kernels are
the general ones for any such value (``pow_tensor_scalar_kernel_impl``'s general path; a
division is a multiplication by the reciprocal), so one stand-in serves every row. 0.3 is none
of the exponents ``torch.pow`` treats apart (0, ±0.5, ±1, 2, 3, −2)."""


@dataclass(frozen=True)
class Family:
    """One NeuSight ``OPName``: the shape columns it reads and the configuration it becomes."""

    name: str
    columns: tuple[str, ...]
    call: str
    """The PyTorch call NeuSight timed, in words (docs/datasets.md's mapping table)."""
    build: Callable[[Mapping[str, int]], OperatorSpec]


def _t(*shape: int) -> TensorSpec:
    return TensorSpec(shape=list(shape))


def _costed(
    op: OperatorSpec, flops: int, rule: str, nbytes: int, params: int, out: TensorSpec
) -> OperatorSpec:
    return op.model_copy(
        update={
            "outputs": [out],
            "flops": flops,
            "flop_rule": rule,
            "bytes": nbytes,
            "params": params,
        }
    )


def _bmm(s: Mapping[str, int]) -> OperatorSpec:
    b, m, n, k = s["B"], s["M"], s["N"], s["K"]
    op = OperatorSpec(op="torch.bmm", form="function", inputs=[_t(b, m, n), _t(b, n, k)])
    return _costed(
        op, 2 * b * m * n * k, "matmul", F32 * (b * m * n + b * n * k + b * m * k), 0, _t(b, m, k)
    )


def _linear(s: Mapping[str, int]) -> OperatorSpec:
    b, m, n, k = s["B"], s["M"], s["N"], s["K"]
    op = OperatorSpec(
        op="torch.nn.Linear",
        form="module",
        args={"in_features": n, "out_features": k, "bias": True},
        dtype="float32",
        inputs=[_t(b, m, n)],
    )
    params = n * k + k
    nbytes = F32 * (b * m * n + params + b * m * k)
    return _costed(op, 2 * b * m * n * k, "matmul", nbytes, params, _t(b, m, k))


def _layer_norm(s: Mapping[str, int]) -> OperatorSpec:
    b, h = s["B"], s["H"]
    op = OperatorSpec(
        op="torch.nn.LayerNorm",
        form="module",
        args={"normalized_shape": [h], "eps": 1e-05, "elementwise_affine": True, "bias": True},
        dtype="float32",
        inputs=[_t(b, h)],
    )
    return _costed(op, 7 * b * h, "normalization", F32 * (2 * b * h + 2 * h), 2 * h, _t(b, h))


def _softmax(s: Mapping[str, int]) -> OperatorSpec:
    b, h = s["B"], s["H"]
    op = OperatorSpec(
        op="torch.nn.Softmax",
        form="module",
        args={"dim": None},
        inputs=[_t(b, h)],
    )
    return _costed(op, 5 * b * h, "softmax", F32 * 2 * b * h, 0, _t(b, h))


def _binary(name: str) -> Callable[[Mapping[str, int]], OperatorSpec]:
    def build(s: Mapping[str, int]) -> OperatorSpec:
        b, h = s["B"], s["H"]
        op = OperatorSpec(op=name, form="function", inputs=[_t(b, h), _t(b, h)])
        return _costed(op, b * h, "elementwise", F32 * 3 * b * h, 0, _t(b, h))

    return build


def _scalar(name: str, value: float) -> Callable[[Mapping[str, int]], OperatorSpec]:
    def build(s: Mapping[str, int]) -> OperatorSpec:
        b, h = s["B"], s["H"]
        op = OperatorSpec(
            op=name,
            form="function",
            inputs=[_t(b, h)],
            call=CallSpec(args=[{"tensor": 0}, value]),
        )
        return _costed(op, b * h, "elementwise", F32 * 2 * b * h, 0, _t(b, h))

    return build


def _unary(
    name: str,
    form: Literal["module", "function"] = "function",
    args: Mapping[str, Any] | None = None,
) -> Callable[[Mapping[str, int]], OperatorSpec]:
    def build(s: Mapping[str, int]) -> OperatorSpec:
        b, h = s["B"], s["H"]
        op = OperatorSpec(op=name, form=form, args=dict(args or {}), inputs=[_t(b, h)])
        return _costed(op, b * h, "elementwise", F32 * 2 * b * h, 0, _t(b, h))

    return build


def _conv(s: Mapping[str, int]) -> OperatorSpec:
    b, cin, cout = s["B"], s["Input_Channel"], s["Output_Channel"]
    k, size, stride, pad = s["Kernel_Szie"], s["Input_Size"], s["Stride"], s["Padding"]
    out = (size + 2 * pad - k) // stride + 1
    op = OperatorSpec(
        op="torch.nn.Conv2d",
        form="module",
        args={
            "in_channels": cin,
            "out_channels": cout,
            "kernel_size": [k, k],
            "stride": [stride, stride],
            "padding": [pad, pad],
            "dilation": [1, 1],
            "groups": 1,
            "bias": False,
            "padding_mode": "zeros",
        },
        dtype="float32",
        inputs=[_t(b, cin, size, size)],
    )
    params = cout * cin * k * k
    flops = 2 * b * cout * out * out * cin * k * k
    nbytes = F32 * (b * cin * size * size + params + b * cout * out * out)
    return _costed(op, flops, "convolution", nbytes, params, _t(b, cout, out, out))


_BH = ("B", "H")
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("bmm", ("B", "M", "N", "K"), "torch.bmm(a, b), a (B, M, N), b (B, N, K)", _bmm),
        Family(
            "linear",
            ("B", "M", "N", "K"),
            "nn.Linear(N, K, bias=True) on (B, M, N)",
            _linear,
        ),
        Family("ln", _BH, "nn.LayerNorm(H) on (B, H)", _layer_norm),
        Family("softmax", _BH, "nn.Softmax() on (B, H) (the last dimension)", _softmax),
        Family("add", _BH, "torch.add(x, y), both (B, H)", _binary("torch.add")),
        Family("mul", _BH, "torch.mul(x, y), both (B, H)", _binary("torch.mul")),
        Family("pow", _BH, "torch.pow(x, y), both (B, H)", _binary("torch.pow")),
        Family("div", _BH, "torch.div(x, y), both (B, H)", _binary("torch.div")),
        Family("addu", _BH, "torch.add(x, r), x (B, H)", _scalar("torch.add", SCALAR)),
        Family("mulu", _BH, "torch.mul(x, r), x (B, H)", _scalar("torch.mul", SCALAR)),
        Family("powu", _BH, "torch.pow(x, r), x (B, H)", _scalar("torch.pow", SCALAR)),
        Family("divu", _BH, "torch.div(x, r), x (B, H)", _scalar("torch.div", SCALAR)),
        Family(
            "relu",
            _BH,
            "nn.ReLU() on (B, H)",
            _unary("torch.nn.ReLU", "module", {"inplace": False}),
        ),
        Family(
            "gelu",
            _BH,
            "nn.GELU() on (B, H)",
            _unary("torch.nn.GELU", "module", {"approximate": "none"}),
        ),
        Family("tanh", _BH, "torch.tanh(x), x (B, H)", _unary("torch.tanh")),
        Family(
            "conv",
            (
                "B",
                "Input_Channel",
                "Output_Channel",
                "Kernel_Szie",
                "Input_Size",
                "Stride",
                "Padding",
            ),
            "nn.Conv2d(Cin, Cout, k, stride, padding, bias=False) on (B, Cin, S, S)",
            _conv,
        ),
    )
}
"""NeuSight ``OPName`` → its family: the call ``neusight/Dataset/collect.py`` (``profile_kernel``)
makes for it, confirmed by the kernel names in the data (docs/datasets.md)."""
