"""Late constructor arguments: one key whichever torch harvested, a build on an older torch."""

from __future__ import annotations

import pytest
import torch

from operator_db.harvest import harvest
from operator_db.ops import build_op, late
from operator_db.ops.arguments import ArgumentError, check_module_args
from operator_db.ops.build import OperatorBuildError
from operator_db.specs import OperatorSpec, operator_key

BN_ARGS = {"num_features": 8, "eps": 1e-5, "momentum": 0.1, "affine": True}


def _bn(**extra: object) -> OperatorSpec:
    return OperatorSpec.model_validate(
        {
            "op": "torch.nn.BatchNorm2d",
            "form": "module",
            "args": {**BN_ARGS, **extra},
            "inputs": [{"shape": [1, 8, 4, 4]}],
        }
    )


def test_a_harvest_leaves_a_late_argument_out_at_its_default() -> None:
    """torch 2.13's norms take ``bias`` (default True); 2.11's do not: a BatchNorm2d gets one
    key whichever harvested it, and ``bias=False`` is kept."""
    model = torch.nn.Sequential(torch.nn.BatchNorm2d(8), torch.nn.BatchNorm2d(8, bias=False))
    result = harvest(model.eval(), torch.empty(1, 8, 4, 4, device="meta"))
    args = [op.args for op in result.spec.operators]
    assert "bias" not in args[0] and args[1]["bias"] is False
    assert operator_key(_bn(), "inference") != operator_key(_bn(bias=True), "inference")


def test_an_older_torch_builds_a_late_argument_at_its_default_and_refuses_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A spec from a 2.13 harvest before this rule says ``bias: true``: a torch without the
    argument drops it; ``bias: false`` needs a newer torch, said in one line."""
    older = frozenset({"self", "num_features", "eps", "momentum", "affine", "track_running_stats"})
    monkeypatch.setattr(late, "_accepts", lambda op: older)
    assert late.local_args("torch.nn.BatchNorm2d", {**BN_ARGS, "bias": True}) == BN_ARGS
    built = build_op(_bn(bias=True))
    assert isinstance(built.module, torch.nn.BatchNorm2d)
    with pytest.raises(OperatorBuildError, match="bias: is not an argument of this torch's"):
        build_op(_bn(bias=False))
    with pytest.raises(ArgumentError, match="needs a newer torch"):
        check_module_args("torch.nn.BatchNorm2d", {**BN_ARGS, "bias": False}, max_numel=10**6)
    check_module_args("torch.nn.BatchNorm2d", {**BN_ARGS, "bias": True}, max_numel=10**6)
    # On this torch, which takes it, nothing is dropped.
    monkeypatch.undo()
    assert late.local_args("torch.nn.BatchNorm2d", {**BN_ARGS, "bias": False})["bias"] is False
