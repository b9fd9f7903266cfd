"""A whole model as one measurable call: rebuilt from its reference, inputs allocated once."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from pydantic import JsonValue
from torch.utils._pytree import tree_flatten

from operator_db.errors import MeasurementError
from operator_db.harvest.inputs import ModelInputs
from operator_db.harvest.refs import load_model, parse_reference
from operator_db.ops.encoding import dtype_from_name
from operator_db.specs.schema import TensorSpec


def prepare_model_run(
    reference: str | None,
    overrides: Mapping[str, JsonValue],
    mode: str,
    dtype: str,
    inputs: Sequence[Mapping[str, Any]],
    *,
    device: torch.device,
    seed: int = 0,
) -> Callable[[], object]:
    """Return one call of the model: a forward pass (inference) or a training step.

    A training step is forward, backward of the sum of the floating outputs, and an SGD step, with
    gradients set to None before each step so nothing accumulates. Weights are randomly initialised:
    time and energy do not depend on their values.

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
            with torch.no_grad():
                return model(*args, **kwargs)

        return forward

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

    return step
