"""The whole-model call and its hollow run: recorded modules replay their outputs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from operator_db.errors import MeasurementError
from operator_db.measure.model_run import hollow_forward, prepare_model_run


class Counting(nn.Module):
    """A Linear that counts its real calls."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.relu(self.lin(x))


class Net(nn.Module):
    """A shared block called twice, Python and a functional op between the calls."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Counting()
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        y = self.block(y * 2)
        assert self.head.in_features == 8  # a model reads its modules' attributes (stubs too)
        return self.head(y + 1)


def test_hollow_replays_recorded_outputs_and_leaves_the_model_alone() -> None:
    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(3, 8)
    with torch.no_grad():
        expected = net(x)
    hollow, stubbed = hollow_forward(net, (x,), {}, {"block", "head"})
    assert stubbed == 2
    calls = net.block.calls
    for _ in range(3):
        out = hollow()
        assert isinstance(out, torch.Tensor)
        assert torch.equal(out, expected)  # the recorded output of the head, in turn
    assert net.block.calls == calls  # stubbed: the block never ran in the hollow passes
    with torch.no_grad():
        assert torch.equal(net(x), expected)
    assert net.block.calls == calls + 2  # the model itself is untouched


def test_a_stub_pays_no_module_call_machinery_the_replay_times_with_its_module() -> None:
    """The replay calls each module (its ``Module.__call__`` counted there); a stub skips that
    machinery, or the hollow run would count it a second time: only the model's own call runs
    it in a hollow pass (a global hook sees that call alone)."""
    net = Net().eval()
    hollow, _ = hollow_forward(net, (torch.randn(3, 8),), {}, {"block", "head"})
    seen: list[str] = []
    handle = nn.modules.module.register_module_forward_pre_hook(
        lambda module, _args: seen.append(type(module).__name__)
    )
    try:
        hollow()
    finally:
        handle.remove()
    assert seen == ["Net"]


def test_hollow_only_for_inference_with_names() -> None:
    ref = "module:operator_db.examples:mlp?hidden=[16]"
    inputs = [{"shape": [2, 784], "dtype": "float32"}]
    cpu = torch.device("cpu")
    plain = prepare_model_run(ref, {}, "inference", "float32", inputs, device=cpu)
    assert plain.hollow is None and plain.stubbed == 0
    stubbed = prepare_model_run(
        ref, {}, "inference", "float32", inputs, device=cpu, stub={"0", "1", "2"}
    )
    assert stubbed.hollow is not None and stubbed.stubbed >= 1
    assert isinstance(stubbed.hollow(), torch.Tensor)
    training = prepare_model_run(ref, {}, "training", "float32", inputs, device=cpu, stub={"0"})
    assert training.hollow is None


def test_hollow_refuses_names_the_model_does_not_call() -> None:
    net = Net().eval()
    expected = r"1 of 3 recorded modules .* \(first: 'not.a.module'\)"
    with pytest.raises(MeasurementError, match=expected):
        hollow_forward(net, (torch.randn(3, 8),), {}, {"block", "head", "not.a.module"})
    ref = "module:operator_db.examples:mlp?hidden=[16]"
    run = prepare_model_run(
        ref,
        {},
        "inference",
        "float32",
        [{"shape": [2, 784]}],
        device=torch.device("cpu"),
        stub={"0", "encoder.7"},
    )
    assert run.hollow is None and run.hollow_unavailable is not None
    assert "'encoder.7'" in run.hollow_unavailable


class Sealed(nn.Linear):
    """A module class that refuses subclasses (as a final class would)."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        raise TypeError("Sealed cannot be subclassed")


def test_a_module_whose_class_cannot_be_subclassed_is_stubbed_through_its_forward() -> None:
    torch.manual_seed(0)
    net = Net().eval()
    net.head = Sealed(8, 2)
    x = torch.randn(3, 8)
    with torch.no_grad():
        expected = net(x)
    hollow, stubbed = hollow_forward(net, (x,), {}, {"block", "head"})
    assert stubbed == 2 and torch.equal(hollow(), expected)  # type: ignore[arg-type]
    assert type(net.head) is Sealed  # the model's own module is untouched
