"""Names of operators: from a callable seen while harvesting to a dotted name, and back.

Specs come from users (files, the REST API) and the worker calls what they name, so a name resolves
only inside an allow-list of pure tensor math: ``torch.nn`` module classes, native ``torch``
functions, ``torch.nn.functional``, ``torch.special``, ``torch.linalg``, ``torch.fft`` and public
``torch.Tensor`` methods and operators. Nothing else is imported or called (no ``torch.load``, no
``os.system``).

Function names are those of ``torch.overrides.resolve_name``: ``torch.matmul``,
``torch.nn.functional.gelu``, ``torch.Tensor.add`` (what ``x + y`` calls), ``torch.Tensor.view``,
``torch.Tensor.__getitem__``. A tensor method is called with the tensor first:
``torch.Tensor.view(x, 6, 4)``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.functional
from torch import nn
from torch.overrides import resolve_name

from operator_db.errors import OperatorDBError


class UnknownOperatorError(OperatorDBError):
    """A spec names an operator that does not exist or is not allowed."""


_NAMESPACES = ("torch.nn.functional", "torch.special", "torch.linalg", "torch.fft")
_TENSOR_OPERATORS = frozenset(
    f"__{stem}__"
    for base in (
        "add",
        "sub",
        "mul",
        "matmul",
        "truediv",
        "floordiv",
        "mod",
        "pow",
        "and",
        "or",
        "xor",
        "lshift",
        "rshift",
    )
    for stem in (base, "r" + base, "i" + base)
) | frozenset(
    {
        "__neg__",
        "__pos__",
        "__abs__",
        "__invert__",
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__getitem__",
        "__setitem__",
        "__div__",
        "__rdiv__",
        "__idiv__",
    }
)
_TENSOR_DENIED = frozenset(
    {
        "backward",
        "register_hook",
        "register_post_accumulate_grad_hook",
        "share_memory_",
        "record_stream",
        "apply_",
        "map_",
        "map2_",
        "tolist",
        "numpy",
        "item",
        "storage",
        "untyped_storage",
        "data_ptr",
        "pin_memory",
        "cuda",
        "cpu",
        "ipu",
        "xpu",
        "mps",
        "hpu",
    }
)


_TORCH_DENIED = frozenset({"from_file"})
"""Native functions that touch the file system."""


def _walk(name: str) -> Any:
    parts = name.split(".")
    if parts[0] != "torch":
        raise UnknownOperatorError(f"operator {name!r} is outside torch")
    obj: Any = torch
    for part in parts[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            raise UnknownOperatorError(f"no operator {name!r} in torch {torch.__version__}")
    return obj


def _function_allowed(name: str) -> bool:
    head, _, last = name.rpartition(".")
    if head == "torch.Tensor":
        if last in _TENSOR_OPERATORS:
            return True
        return not last.startswith("_") and last not in _TENSOR_DENIED
    if last.startswith("_"):
        return False
    if head in _NAMESPACES:
        return True
    if head == "torch":
        return last not in _TORCH_DENIED and (
            hasattr(torch._C._VariableFunctions, last) or last in torch.functional.__all__
        )
    return False


@functools.cache
def resolve_function(name: str) -> Callable[..., Any]:
    """Return the function a ``form: function`` operator names.

    Raises:
        UnknownOperatorError: the name does not resolve, or lies outside the allow-list.
    """
    if not _function_allowed(name):
        raise UnknownOperatorError(
            f"function {name!r} is not an allowed operator (torch, torch.nn.functional, "
            "torch.special, torch.linalg, torch.fft and public torch.Tensor methods are)"
        )
    obj = _walk(name)
    if not callable(obj) or inspect.isclass(obj):
        raise UnknownOperatorError(f"{name!r} is not a function")
    return obj  # type: ignore[no-any-return]


@functools.cache
def resolve_module(name: str) -> type[nn.Module]:
    """Return the ``torch.nn`` module class a ``form: module`` operator names.

    Raises:
        UnknownOperatorError: the name does not resolve to a ``torch.nn`` module class.
    """
    if not name.startswith("torch.nn."):
        raise UnknownOperatorError(f"module {name!r} is not a torch.nn class")
    obj = _walk(name)
    if not (
        inspect.isclass(obj)
        and issubclass(obj, nn.Module)
        and obj.__module__.startswith("torch.nn.")
    ):
        raise UnknownOperatorError(f"{name!r} is not a torch.nn module class")
    return obj


def module_name(cls: type[nn.Module]) -> str | None:
    """Return the dotted name a spec uses for a ``torch.nn`` class (``torch.nn.Conv2d``), or None.

    None means the class is not one of torch.nn's own (a subclass elsewhere may change ``forward``).
    """
    if not cls.__module__.startswith("torch.nn."):
        return None
    for name in (f"torch.nn.{cls.__name__}", f"{cls.__module__}.{cls.__qualname__}"):
        try:
            if resolve_module(name) is cls:
                return name
        except UnknownOperatorError:
            continue
    return None


@functools.cache
def _public_function_name(func: Callable[..., Any]) -> str | None:
    name: str | None = resolve_name(func)
    if name is None:
        module = getattr(func, "__module__", None)
        qualname = getattr(func, "__qualname__", None)
        if not (module and qualname):
            return None
        name = f"{module}.{qualname}"
    if name.startswith("torch.functional."):  # torch.einsum reads better than its home module
        name = "torch." + name.removeprefix("torch.functional.")
    try:
        if resolve_function(name) is func:
            return name
    except UnknownOperatorError:
        return None
    return None


def function_name(func: Callable[..., Any]) -> str | None:
    """Return the allowed dotted name of a function seen by a ``TorchFunctionMode``, or None.

    None means the harvester cannot name it in a way the builder resolves (a custom autograd
    function, ``torch.ops`` calls, a library's own function): such a call is recorded as opaque.
    """
    try:
        return _public_function_name(func)
    except TypeError:  # unhashable callables cannot be cached; they are never torch functions
        return None


def is_property_access(func: Callable[..., Any]) -> bool:
    """Whether ``func`` is a tensor property's getter or setter (``x.shape``, ``x.T``, ``x.data``).

    Properties return metadata or aliases; they move no data and are not recorded.
    """
    return getattr(func, "__name__", "") in ("__get__", "__set__", "__delete__")
