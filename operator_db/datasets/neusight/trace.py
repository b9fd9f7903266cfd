"""NeuSight's per-node traces: the fx nodes of a one-layer model, and the configurations they are.

A trace (``label/<Device>/<run>.csv.gz``) is the ``torch.fx`` graph of the model built with one
transformer layer, one row per node, each node timed alone (``neusight/Tracing/analysis.py``:
the call's forward, then each autograd function of its result replayed with all-ones gradients;
ms, mean of the 5 fastest of 25). A node is mapped to the configuration of the run's harvested
spec that is the same call (:func:`match_nodes`): the same operator as operator-db's harvester
records it (fx's ``call_module Linear`` is ``torch.nn.Linear``, ``operator.add(x, y)`` is
``torch.Tensor.add``, a scalar on the left is moved to the right as ``x.__radd__`` records it),
the same input and output shapes, and the same constants where the trace shows them (``_args``,
``_kwargs``; a value computed from sizes is unknown and matches any). Two documented equivalents
(:data:`EQUIVALENTS`) cover calls that transformers 5 writes otherwise than the traced 4.x did.
Ties between configurations go to the one whose locations hold the node's module, then to the
one whose strided inputs are the node's non-contiguous ones.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from operator_db.specs.schema import OperatorSpec

COLUMNS = (
    "op",
    "target",
    "_args",
    "_kwargs",
    "meta",
    "output_shape",
    "dtype",
    "contiguous",
    "Name",
)
TIMES = ("latency", "fw_latency", "bw_latency", "acc_latency")
OPERATORS = frozenset(name for name in dir(operator) if not name.startswith("_"))
"""``<built-in function NAME>`` targets that are Python's ``operator`` module, not F.NAME."""
_RENAMED = {"truediv": "div", "getitem": "__getitem__"}
"""``operator`` functions whose tensor method has another name."""
_REFLECTED = {"add": "add", "mul": "mul", "sub": "__rsub__", "truediv": "__rtruediv__"}
"""A scalar on the left: the method the harvester records (``1.0 + x`` is ``x.add(1.0)``)."""
EQUIVALENTS = {
    "dropout": "nn.Dropout(p) as a module ≡ F.dropout(x, p, training) with the spec's mode (the "
    "module's forward is that call; transformers 5 calls the function where 4.x had a module)",
    "div-by-constant": "x / c ≡ x * (1/c) where 1/c is exact (x / 8.0 and x * 0.125): PyTorch "
    "divides by a Python scalar by multiplying with its reciprocal (same kernel)",
    "softmax-dtype": "F.softmax(x, dim, dtype=None) ≡ F.softmax(x, dim, dtype=x.dtype): a cast "
    "to the input's own dtype is no cast (transformers 5 OPT passes dtype=torch.float32)",
    "folded-batch": "torch.bmm, F.softmax or F.dropout on (B·H, ...) ≡ torch.matmul, F.softmax or "
    "F.dropout on (B, H, ...) with the same last dimensions: the same work on the same memory, "
    "the batch and heads folded into one dimension (transformers 4.x OPT attention) or not (5.x)",
}
"""Calls mapped to a spec configuration of another form, flagged ``equivalent`` (docs)."""
_CLASS = re.compile(r"\('([^']*)', <class '([^']+)'>\)")
_LAYER0 = re.compile(r"(?:^|\.)(?:h|layer|layers)\.0$")


@dataclass(frozen=True)
class Ref:
    """A reference to another node in an fx argument."""

    name: str


@dataclass(frozen=True)
class Unknown:
    """A value the trace does not show (a name that is no node, an expression)."""


@dataclass(frozen=True)
class TraceNode:
    """One fx node of a trace, its arguments parsed, its times in ms."""

    line: int
    name: str
    op: str
    target: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output_shape: tuple[int, ...] | None
    """The output's shape where it is a tensor, else None."""
    contiguous: bool
    """Whether the output is contiguous (True where it is no tensor)."""
    dtype: str
    """The output's dtype (``float32``; empty where it is no tensor)."""
    modules: tuple[tuple[str, str], ...]
    """``nn_module_stack``: (module path, class) from the model down to the node's module."""
    latency_ms: float
    fw_ms: float
    bw_ms: float
    acc_ms: float

    @property
    def module(self) -> str | None:
        """The path of the innermost module the node runs in."""
        return self.modules[-1][0] if self.modules else None

    @property
    def in_layer0(self) -> bool:
        """Whether the node runs inside the model's first transformer layer."""
        return any(_LAYER0.search(path) for path, _ in self.modules)

    @property
    def form(self) -> str:
        """The node as ``op target`` with addresses left out, for the unmapped lists."""
        target = re.sub(r" at 0x[0-9a-f]+", "", self.target)
        if self.op == "call_module" and self.modules:
            target = self.modules[-1][1]
        return f"{self.op} {target}"


@dataclass(frozen=True)
class Match:
    """A node mapped to a spec configuration."""

    node: TraceNode
    key: str
    how: str
    """``same call``, or the name of the equivalent in :data:`EQUIVALENTS`."""
    ambiguous: int = 0
    """Other configurations that fit as well (the first in spec order was taken)."""


@dataclass
class TraceMatch:
    """What mapping one trace's nodes did."""

    matches: list[Match] = field(default_factory=list)
    unmapped: list[TraceNode] = field(default_factory=list)
    """Nodes with a tensor output that no configuration of the spec is."""
    python: list[TraceNode] = field(default_factory=list)
    """Nodes whose result is no tensor: sizes, attributes, ``split``'s tuple (no kernel of their
    own; each reads a timer's floor, about 10 µs)."""
    other: list[TraceNode] = field(default_factory=list)
    """Placeholders, ``get_attr`` and the output (never timed)."""


def _value(node: ast.expr, names: set[str]) -> Any:
    """Return a parsed fx argument: constants, tuples, slices, dtypes, node references."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return Ref(node.id) if node.id in names else Unknown()
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _value(node.operand, names)
        return -inner if isinstance(inner, int | float) else Unknown()
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_value(e, names) for e in node.elts)
    if isinstance(node, ast.Dict):
        return {
            _value(k, names) if k is not None else None: _value(v, names)
            for k, v in zip(node.keys, node.values, strict=True)
        }
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "slice":
        return slice(*(_value(a, names) for a in node.args))
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "torch"
    ):
        return {"dtype": node.attr}
    return Unknown()


def parse_args(text: str, names: set[str]) -> Any:
    """Parse an ``_args`` or ``_kwargs`` cell; Unknown where it is no Python expression."""
    try:
        return _value(ast.parse(text.strip(), mode="eval").body, names)
    except (SyntaxError, ValueError, RecursionError):
        return Unknown()


def _shape(text: Any) -> tuple[int, ...] | None:
    try:
        value = ast.literal_eval(str(text))
    except (SyntaxError, ValueError):
        return None
    if isinstance(value, tuple) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


def read_trace(frame: pd.DataFrame) -> list[TraceNode] | str:
    """Return a trace's nodes in order, or why it cannot be read (a column missing)."""
    missing = [c for c in (*COLUMNS, *TIMES) if c not in frame.columns]
    if missing:
        return f"no {', '.join(repr(c) for c in missing)} column"
    names = set(frame["Name"].astype(str))
    times = {c: pd.to_numeric(frame[c], errors="coerce").fillna(0.0).to_numpy() for c in TIMES}
    out = []
    for i, record in enumerate(frame[list(COLUMNS)].to_dict("records")):
        args = parse_args(str(record["_args"]), names)
        kwargs = parse_args(str(record["_kwargs"]), names)
        is_tensor = str(record["dtype"]).startswith("torch.")
        out.append(
            TraceNode(
                line=i + 2,
                name=str(record["Name"]),
                op=str(record["op"]),
                target=str(record["target"]),
                args=args if isinstance(args, tuple) else (args,),
                kwargs=kwargs if isinstance(kwargs, dict) else {},
                output_shape=_shape(record["output_shape"]) if is_tensor else None,
                contiguous=str(record["contiguous"]) != "False",
                dtype=str(record["dtype"]).removeprefix("torch.") if is_tensor else "",
                modules=tuple(_CLASS.findall(str(record["meta"]))),
                latency_ms=float(times["latency"][i]),
                fw_ms=float(times["fw_latency"][i]),
                bw_ms=float(times["bw_latency"][i]),
                acc_ms=float(times["acc_latency"][i]),
            )
        )
    return out


@dataclass(frozen=True)
class _Call:
    """A node as the harvester would see the call: operator name, arguments, tensor shapes."""

    op: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    how: str = "same call"
    fold: bool = False
    """Shapes match with the spec's first two dimensions folded into the node's first."""


@dataclass(frozen=True)
class _Tensor:
    shape: tuple[int, ...]
    contiguous: bool
    dtype: str


def node_dtype(value: Any) -> str | None:
    """Return the dtype name of a parsed argument that is a tensor (``float32``), else None."""
    return value.dtype if isinstance(value, _Tensor) else None


def _calls(node: TraceNode, nodes: dict[str, TraceNode], mode: str) -> list[_Call]:
    """Return the harvester's names for a node's call (alternatives first to last)."""

    def arg(value: Any) -> Any:
        if isinstance(value, Ref):
            found = nodes.get(value.name)
            if found is None or found.output_shape is None:
                return Unknown()
            return _Tensor(found.output_shape, found.contiguous, found.dtype)
        if isinstance(value, tuple):
            return tuple(arg(v) for v in value)
        if isinstance(value, dict):
            return {k: arg(v) for k, v in value.items()}
        return value

    args = tuple(arg(a) for a in node.args)
    kwargs = {str(k): arg(v) for k, v in node.kwargs.items()}
    target = re.sub(r" at 0x[0-9a-f]+", "", node.target)
    if node.op == "call_module":
        cls = node.modules[-1][1] if node.modules else ""
        if not cls.startswith("torch.nn.modules."):
            return []
        name = cls.rsplit(".", 1)[-1]
        found = [_Call(f"torch.nn.{name}", args, {})]
        if name == "Dropout":
            training = {"training": mode == "training"}
            found.append(_Call("torch.nn.functional.dropout", args, training, "dropout"))
        return found
    if node.op == "call_method":
        return [_Call(f"torch.Tensor.{node.target}", args, kwargs)]
    if node.op != "call_function":
        return []
    if found_method := re.fullmatch(r"<built-in method (\w+) of type object>", target):
        found = [_Call(f"torch.{found_method[1]}", args, kwargs)]
        if found_method[1] == "bmm":
            found.append(_Call("torch.matmul", args, kwargs, "folded-batch", fold=True))
        return found
    if found_function := re.fullmatch(r"<(?:built-in )?function (\w+)>", target):
        name = found_function[1]
        if name in OPERATORS and target.startswith("<built-in"):
            return _operator(name, args, kwargs)
        found = [_Call(f"torch.nn.functional.{name}", args, kwargs)]
        if name == "dropout":
            found.append(_Call("torch.nn.Dropout", args[:1], {}, "dropout"))
        if name == "softmax" and kwargs.get("dtype", 0) is None and args:
            own = {**kwargs, "dtype": {"dtype": node_dtype(args[0])}}
            found.append(_Call(found[0].op, args, own, "softmax-dtype"))
            found.append(_Call(found[0].op, args, own, "folded-batch, softmax-dtype", fold=True))
        if name in ("softmax", "dropout"):
            found.append(_Call(found[0].op, args, kwargs, "folded-batch", fold=True))
        return found
    return []


def _operator(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[_Call]:
    tensors = [isinstance(a, _Tensor) for a in args]
    if not any(tensors) or name in ("getattr", "setitem"):
        return []
    if not tensors[0] and len(args) == 2 and name in _REFLECTED:
        return [_Call(f"torch.Tensor.{_REFLECTED[name]}", (args[1], args[0]), kwargs)]
    found = [_Call(f"torch.Tensor.{_RENAMED.get(name, name)}", args, kwargs)]
    scalar = args[1] if len(args) == 2 else None
    if name == "truediv" and isinstance(scalar, int | float) and scalar not in (0, True, False):
        inverse = 1.0 / scalar
        if 1.0 / inverse == scalar:
            found.append(_Call("torch.Tensor.mul", (args[0], inverse), kwargs, "div-by-constant"))
    return found


def _spec_args(op: OperatorSpec) -> tuple[list[Any], dict[str, Any]]:
    if op.call is None:
        return [{"tensor": i} for i in range(len(op.inputs))], {}
    return list(op.call.args), dict(op.call.kwargs)


def _tensor_ref(value: Any) -> tuple[int, bool] | None:
    """Return (input index, strided) of a spec call argument that is a tensor."""
    if isinstance(value, dict) and set(value) == {"tensor"}:
        return int(value["tensor"]), False
    if isinstance(value, dict) and "strided" in value:
        return int(value["strided"]["tensor"]), True
    return None


def _same(ours: Any, theirs: Any) -> bool:
    """Whether a trace constant equals a spec call value (Unknown and tensors aside)."""
    if isinstance(ours, Unknown):
        return True
    if isinstance(ours, bool) or isinstance(theirs, bool):
        return ours is theirs or ours == theirs
    if isinstance(ours, int | float) and isinstance(theirs, int | float):
        return math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=0.0)
    if isinstance(ours, slice):
        parts = [ours.start, ours.stop, ours.step]
        return (
            isinstance(theirs, dict)
            and set(theirs) == {"slice"}
            and all(_same(a, b) for a, b in zip(parts, theirs["slice"], strict=True))
        )
    if isinstance(ours, tuple) and isinstance(theirs, list):
        return len(ours) == len(theirs) and all(
            _same(a, b) for a, b in zip(ours, theirs, strict=True)
        )
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours == theirs
    return bool(ours == theirs)


def _fits(call: _Call, node: TraceNode, op: OperatorSpec) -> int | None:
    """Return how well a spec configuration is the node's call (higher better), None if not."""
    if not op.outputs or node.output_shape is None:
        return None
    out = tuple(op.outputs[0].shape)
    if not _same_shape(node.output_shape, out, call.fold) and not (
        out == () and node.output_shape == (1,)
    ):
        return None
    ours = [a for a in _flat((call.args, call.kwargs)) if isinstance(a, _Tensor)]
    if len(ours) != len(op.inputs) or not all(
        _same_shape(t.shape, tuple(s.shape), call.fold)
        for t, s in zip(ours, op.inputs, strict=True)
    ):
        return None
    spec_args, spec_kwargs = _spec_args(op)
    strided: list[tuple[bool, bool]] = []
    for position, value in enumerate(call.args):
        if isinstance(value, Unknown) or (
            isinstance(value, tuple) and any(isinstance(v, Unknown) for v in _flat(value))
        ):
            break  # a computed size may stand for several of the spec's arguments
        if position >= len(spec_args):
            return None
        ref = _tensor_ref(spec_args[position])
        if isinstance(value, _Tensor):
            if ref is None:
                return None
            strided.append((ref[1], not value.contiguous))
        elif ref is not None or not _same(value, spec_args[position]):
            return None
    else:
        if len(call.args) != len(spec_args) and op.form != "module":
            return None
    for name, value in call.kwargs.items():
        known = name in spec_kwargs and name != "device" and not isinstance(value, _Tensor)
        if known and not _same(value, spec_kwargs[name]):
            return None
    score = 0
    if node.module is not None and node.module in op.locations:
        score += 2
    if strided and all(spec == ours for spec, ours in strided):
        score += 1
    return score


def _same_shape(ours: tuple[int, ...], theirs: tuple[int, ...], fold: bool) -> bool:
    """Whether shapes are equal, or (``fold``) equal with ``theirs``' first two folded."""
    if not fold:
        return ours == theirs
    return (
        len(theirs) == len(ours) + 1
        and len(ours) >= 2
        and ours[0] == theirs[0] * theirs[1]
        and ours[1:] == theirs[2:]
    )


def _flat(value: Any) -> Iterator[Any]:
    if isinstance(value, tuple | list):
        for v in value:
            yield from _flat(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _flat(v)
    else:
        yield value


def match_nodes(
    nodes: Sequence[TraceNode], operators: Sequence[OperatorSpec], keys: Sequence[str], mode: str
) -> TraceMatch:
    """Map each node of a trace to the spec configuration that is its call, if any.

    ``operators`` and ``keys``: the run's spec, in order; ``mode``: its mode.
    """
    named = {n.name: n for n in nodes}
    by_op: dict[str, list[int]] = {}
    for index, op in enumerate(operators):
        if op.form != "opaque":
            by_op.setdefault(op.op, []).append(index)
    out = TraceMatch()
    for node in nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            out.other.append(node)
            continue
        if node.output_shape is None:
            out.python.append(node)
            continue
        found = _best(node, operators, by_op, mode, named)
        if found is None:
            out.unmapped.append(node)
        else:
            index, how, ties = found
            out.matches.append(Match(node, keys[index], how, ties))
    return out


def _best(
    node: TraceNode,
    operators: Sequence[OperatorSpec],
    by_op: dict[str, list[int]],
    mode: str,
    named: dict[str, TraceNode],
) -> tuple[int, str, int] | None:
    for call in _calls(node, named, mode):
        scored = []
        for index in by_op.get(call.op, []):
            score = _fits(call, node, operators[index])
            if score is not None:
                scored.append((score, index))
        if scored:
            top = max(score for score, _ in scored)
            best = [index for score, index in scored if score == top]
            return best[0], call.how, len(best) - 1
    return None
