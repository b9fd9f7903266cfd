"""Specs that must be refused at the door, shared by the CLI's and the API's tests."""

from __future__ import annotations

from typing import Any

import yaml

from tests.helpers import linear_op, relu_op, spec_dict


def _spec(op: dict[str, Any] | None = None, **model: Any) -> str:
    data = spec_dict("bad", operators=[op] if op is not None else None)
    data["model"] |= model
    return yaml.safe_dump(data)


def billion_laughs() -> str:
    """Return a YAML "billion laughs" of under 600 bytes: nine levels of nine aliases."""
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        text += f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]\n"
    return text


def _linear(**args: Any) -> dict[str, Any]:
    op = linear_op()
    op["args"] |= args
    return op


def _call(op: str, args: list[Any], inputs: list[list[int]] | None = None) -> dict[str, Any]:
    """Return a function operator calling ``op`` with ``args`` (``{"tensor": i}`` for inputs)."""
    tensors = [{"shape": shape, "dtype": "float32"} for shape in inputs or []]
    return {"op": op, "form": "function", "inputs": tensors, "outputs": [], "call": {"args": args}}


BAD_SPECS: dict[str, tuple[str, str]] = {
    # case: (YAML text, the start of the error after "SOURCE: ")
    "op outside the allow-list": (
        _spec({**relu_op([4, 4]), "op": "os.system", "form": "function"}),
        "operators[0].op: function 'os.system' is not an allowed operator",
    ),
    "module outside torch.nn": (
        _spec({**relu_op([4, 4]), "op": "subprocess.Popen"}),
        "operators[0].op: module 'subprocess.Popen' is not a torch.nn class",
    ),
    "huge in_features": (
        _spec(_linear(in_features=10**12)),
        "operators[0].args.in_features: torch.nn.Linear: integers must lie within",
    ),
    "string in_features": (
        _spec(_linear(in_features="abc")),
        'operators[0].args.in_features: torch.nn.Linear: must be int, got "abc"',
    ),
    "weight over the tensor limit": (
        _spec(_linear(in_features=2**20, out_features=2**20)),
        "operators[0].args: torch.nn.Linear: its parameters and buffers would hold",
    ),
    "2**40-element tensor": (
        _spec(relu_op([2**20, 2**20])),
        f"operators[0].inputs[0].shape: tensor of {2**40} elements, over the limit",
    ),
    "torch.empty of 400 GB": (  # a factory: no input, the size in the arguments
        _spec(_call("torch.empty", [100000, 1000000])),
        f"operators[0].call: torch.empty creates a tensor of {10**11} elements "
        "(aten.empty.memory_format), over the limit of",
    ),
    "torch.ones([3e9, 3])": (  # YAML reads 3e9 as a float: torch refuses it, the size is read
        _spec(_call("torch.ones", [[3e9, 3]])),
        f"operators[0].call: torch.ones asks for a tensor of {9 * 10**9} elements in its "
        "arguments, over the limit of",
    ),
    "Tensor.repeat(x, 1e11)": (
        _spec(_call("torch.Tensor.repeat", [{"tensor": 0}, 1e11], [[4, 4]])),
        f"operators[0].call: torch.Tensor.repeat asks for a tensor of {10**11} elements in its "
        "arguments, over the limit of",
    ),
    "count beyond 64 bits": (
        _spec({**relu_op([4, 4]), "count": 2**63}),
        f"operators[0].count: must be <= {2**31 - 1}, got {2**63}",
    ),
    "count beyond its 32-bit column": (
        _spec({**relu_op([4, 4]), "count": 5_892_888_712}),  # PostgreSQL said "out of range"
        f"operators[0].count: must be <= {2**31 - 1}, got 5892888712",
    ),
    "batch size beyond its 32-bit column": (
        _spec(batch_size=2**31),
        f"model.batch_size: must be <= {2**31 - 1}, got {2**31}",
    ),
    "params beyond 64 bits": (
        _spec({**relu_op([4, 4]), "params": 10**30}),
        "operators[0].params: must be <=",
    ),
    "batch size beyond 64 bits": (
        _spec(batch_size=2**64),
        "model.batch_size: must be <=",
    ),
    "integer beyond 64 bits in overrides": (
        _spec(overrides={"hidden": [2**64]}),
        "model.overrides: hidden[0]: integer 18446744073709551616 is outside",
    ),
    "NUL in the description": (
        _spec(description="a\x00b"),
        "model.description: must not hold a NUL character",
    ),
    "billion laughs": (billion_laughs(), "line 6, column 8: YAML over a limit: aliases"),
    "1000-deep lists": ("[" * 1000 + "]" * 1000, "line 1, column 65: YAML over a limit"),
    "1000-deep mappings": ("{a: " * 1000 + "1" + "}" * 1000, "line 1, column 254: YAML"),
}
