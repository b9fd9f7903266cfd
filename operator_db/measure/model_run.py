"""A whole model as one measurable call: rebuilt from its reference, inputs allocated once.

Also its *hollow* run: the same forward pass in which every recorded module returns the output it
returned in a real pass, without computing. What is left is the time the model spends outside its
recorded modules: Python between them, container modules' calls, and the functional operators.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import JsonValue
from torch.utils._pytree import tree_flatten

from operator_db.errors import MeasurementError
from operator_db.harvest.inputs import ModelInputs
from operator_db.harvest.refs import load_model, parse_reference
from operator_db.ops.encoding import dtype_from_name
from operator_db.specs.schema import TensorSpec


@dataclass(frozen=True)
class ModelRun:
    """One call of a whole model, and of its hollow forward pass where one was asked for."""

    run: Callable[[], object]
    hollow: Callable[[], object] | None = None
    stubbed: int = 0
    """Modules that return their recorded output in the hollow run."""
    hollow_unavailable: str | None = None
    """Why a hollow run was asked for and could not be built."""


def prepare_model_run(
    reference: str | None,
    overrides: Mapping[str, JsonValue],
    mode: str,
    dtype: str,
    inputs: Sequence[Mapping[str, Any]],
    *,
    device: torch.device,
    seed: int = 0,
    stub: Collection[str] = (),
) -> ModelRun:
    """Return one call of the model: a forward pass (inference) or a training step.

    A training step is forward, backward of the sum of the floating outputs, and an SGD step, with
    gradients set to None before each step so nothing accumulates. Weights are randomly initialised:
    time and energy do not depend on their values.

    ``stub`` names the modules (qualified names, as in a spec's ``locations``) that the hollow run
    replaces by their recorded outputs; with names given, an inference model also gets a hollow
    run (:func:`hollow_forward`).

    Raises:
        MeasurementError: the spec has no reference to rebuild the model from.
        HarvestError: the reference cannot be loaded.
    """
    if not reference:
        raise MeasurementError("the model has no reference: it cannot be rebuilt as a whole")
    ref = parse_reference(reference, dict(overrides))
    target = dtype_from_name(dtype)
    torch.manual_seed(seed)
    model = load_model(ref, device=str(device))
    if target.is_floating_point:
        model = model.to(dtype=target)
    specs = [TensorSpec.model_validate(dict(t)) for t in inputs]
    args, kwargs = ModelInputs.of(specs).materialize(
        device, target if target.is_floating_point else None, seed
    )
    if mode == "inference":
        model.eval()

        def forward() -> object:
            if torch.is_grad_enabled():  # on its own; a measurement runs under one no_grad
                with torch.no_grad():
                    return model(*args, **kwargs)
            return model(*args, **kwargs)

        if not stub:
            return ModelRun(forward)
        try:
            hollow, stubbed = hollow_forward(model, args, kwargs, stub)
        except MeasurementError as exc:
            return ModelRun(forward, hollow_unavailable=str(exc))
        return ModelRun(forward, hollow, stubbed)

    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)

    def step() -> object:
        optimizer.zero_grad(set_to_none=True)
        out = model(*args, **kwargs)
        leaves = [
            t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad
        ]
        if not leaves:
            raise MeasurementError("the model's outputs need no gradient: nothing to train")
        loss = torch.stack([t.float().sum() for t in leaves]).sum()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        return out

    return ModelRun(step)


def hollow_forward(
    model: torch.nn.Module,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    stub: Collection[str],
) -> tuple[Callable[[], object], int]:
    """Return the hollow forward pass of an inference ``model`` and how many modules it stubs.

    One real forward pass records, per module named in ``stub``, its outputs in call order. The
    hollow pass runs a shallow copy of the model (the parameters and buffers are shared, not
    copied) in which each of those modules returns its recorded outputs in turn. The model itself
    is left untouched.

    Raises:
        MeasurementError: a named module is not in the model, or the real pass never called it
            (the spec was harvested from another build of the model): a hollow pass that still
            computed it would count an operator as time between operators.
    """
    names = set(stub)
    targets = {
        name: module
        for name, module in model.named_modules(remove_duplicate=False)
        if name in names
    }
    recorded: dict[int, list[Any]] = {id(m): [] for m in targets.values()}
    handles = [
        module.register_forward_hook(lambda mod, _args, out: recorded[id(mod)].append(out))
        for module in {id(m): m for m in targets.values()}.values()
    ]
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    missing = sorted(names - {n for n, m in targets.items() if recorded[id(m)]})
    if missing:
        raise MeasurementError(
            f"no hollow run: {len(missing)} of {len(names)} recorded modules are not called in "
            f"this build of the model (first: {missing[0]!r})"
        )
    shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    hollow = copy.deepcopy(model, memo=dict(shared))
    copies = dict(hollow.named_modules(remove_duplicate=False))
    stubbed: set[int] = set()
    for name, module in targets.items():
        twin = copies[name]
        if id(twin) not in stubbed:
            _stub(twin, recorded[id(module)])
            stubbed.add(id(twin))

    def forward() -> object:
        if torch.is_grad_enabled():  # on its own; a measurement runs under one no_grad
            with torch.no_grad():
                return hollow(*args, **kwargs)
        return hollow(*args, **kwargs)

    return forward, len(stubbed)


_STUB_CLASSES: dict[type, type] = {}
"""Each module class's stub class (made once)."""


def _stub(module: torch.nn.Module, outputs: list[Any]) -> None:
    """Make ``module`` (a copy in the hollow run) return ``outputs`` in turn, cyclically.

    The module becomes an instance of a subclass of its own class whose ``__call__`` returns
    the next output: its attributes stay (transformers' MobileNetV2 reads a convolution's
    ``stride`` and ``kernel_size`` to pad before calling it). ``__call__`` itself is replaced, not
    ``forward``: a module's call machinery (``Module._call_impl``, 1.1 µs a call on a 2-vCPU
    EPYC VM) is timed with each module in the replay (the replay calls the module), so a hollow
    run that also paid it counted it twice (about 160 calls in a ResNet-50 pass: 0.4 ms of 93 ms
    there). Left is a Python call of an object, 0.26 µs, which the model's own ``self.conv1(x)``
    pays as well. A class that refuses a subclass keeps its class and gets the stub as its
    ``forward``, the machinery counted twice.
    """
    cls = type(module)
    turn = itertools.cycle(outputs).__next__
    try:
        if cls not in _STUB_CLASSES:
            _STUB_CLASSES[cls] = type(f"Stub{cls.__name__}", (cls,), {"__call__": _next_output})
        object.__setattr__(module, "_stub_next", turn)
        module.__class__ = _STUB_CLASSES[cls]
    except TypeError:
        object.__setattr__(module, "forward", lambda *_args, **_kwargs: turn())


def _next_output(self: torch.nn.Module, *_args: Any, **_kwargs: Any) -> Any:
    """Return the module's next recorded output (a stub's call); the inputs are ignored."""
    return self._stub_next()  # type: ignore[operator]
