"""``opdb harvest``, on a local typer app (the command is registered in cli/main.py elsewhere)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from operator_db.cli.harvest import harvest, output_path
from operator_db.errors import HarvestError, OperatorDBError
from operator_db.specs import load_spec

app = typer.Typer(pretty_exceptions_enable=False)
app.command()(harvest)


@app.callback()
def _root() -> None:
    """Root, so that ``harvest`` is a sub-command as in ``opdb``."""


def invoke(*args: str) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(app, ["harvest", *args])
    return result.exit_code, result.output, result.exception


def test_one_spec_per_batch_size_and_a_summary(tmp_path: Path) -> None:
    code, out, exc = invoke(
        "module:operator_db.examples:mlp",
        "hidden=[64]",
        "-i",
        "1x784",
        "-b",
        "1,4",
        "-o",
        str(tmp_path),
        "--name",
        "tiny",
    )
    assert (code, exc) == (0, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-b1.yaml", "tiny-b4.yaml"]
    spec = load_spec(tmp_path / "tiny-b4.yaml", max_bytes=10**6).spec
    assert spec.model.reference == "module:operator_db.examples:mlp"
    assert spec.model.overrides == {"hidden": [64]}
    assert spec.model.batch_size == 4 and spec.model.inputs[0].shape == [4, 784]
    assert [(op.op, op.count) for op in spec.operators] == [
        ("torch.nn.Linear", 1),
        ("torch.nn.ReLU", 1),
        ("torch.nn.Linear", 1),
    ]
    assert "harvested" in out and "tiny-b4" in out
    flops = 2 * 4 * 784 * 64 + 4 * 64 + 2 * 4 * 64 * 10
    assert f"{flops / 1e9:.3f}" in out


def test_training_mode_and_a_file_name_with_the_batch(tmp_path: Path) -> None:
    code, out, exc = invoke(
        "module:operator_db.examples:mlp",
        "-i",
        "2x784",
        "--mode",
        "training",
        "-o",
        str(tmp_path / "mlp-{batch}.yaml"),
    )
    assert (code, exc) == (0, None)
    spec = load_spec(tmp_path / "mlp-2.yaml", max_bytes=10**6).spec
    assert spec.model.mode == "training"
    assert all(op.flops_backward is not None for op in spec.operators)
    assert "GFLOPs bwd" in out


GPT2 = ["transformers:GPT2Model", "n_layer=1", "n_embd=64", "n_head=2", "vocab_size=100"]


def test_custom_leaves_are_traced_and_skipped_calls_listed(tmp_path: Path) -> None:
    code, out, exc = invoke(*GPT2, "-o", str(tmp_path))
    assert (code, exc) == (0, None)
    spec = load_spec(tmp_path / "gpt2model-b1.yaml", max_bytes=10**6).spec
    assert spec.model.inputs[0].value_range == (0, 100)
    assert {op.form for op in spec.operators} == {"module", "function"}
    assert spec.provenance["custom_leaves"] == "trace"
    lines = [line for line in out.splitlines() if not line.startswith(("┃", "│", "┏", "┡", "└"))]
    assert lines[-4:] == [
        "traced (4x, recorded as its calls): transformers.pytorch_utils.Conv1D at h.0.attn.c_attn, "
        "h.0.attn.c_proj, h.0.mlp.c_fc ...",
        "traced (1x, recorded as its calls): transformers.activations.NewGELUActivation at "
        "h.0.mlp.act",
        "skipped (2x, not in the spec): torch.tensor at h.0.attn: output tensor [0]:float32 is "
        "empty (a spec's dimensions are positive)",
        "skipped (2x, not in the spec): torch.cat at h.0.attn: input tensor [0]:float32 is empty "
        "(a spec's dimensions are positive)",
    ]


def test_custom_leaves_can_stay_opaque(tmp_path: Path) -> None:
    code, out, exc = invoke(*GPT2, "--opaque-custom-leaves", "-o", str(tmp_path))
    assert (code, exc) == (0, None)
    assert (
        "opaque (1x, never measured): transformers.pytorch_utils.Conv1D at h.0.attn.c_attn: "
        "transformers.pytorch_utils.Conv1D is not a torch.nn class" in out
    )
    spec = load_spec(tmp_path / "gpt2model-b1.yaml", max_bytes=10**6).spec
    assert spec.provenance["custom_leaves"] == "opaque"
    # The old flag is the default now: accepted, and it changes nothing.
    code, out, exc = invoke(*GPT2, "--trace-custom-leaves", "-o", str(tmp_path / "old"))
    assert (code, exc) == (0, None) and "opaque (" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["resnet50"], "bad model reference 'resnet50'"),
        (["torchvision:resnet50", "-i", "1x3x224x224"], "pip install torchvision"),
        (["module:operator_db.examples:mlp", "-i", "1xax3"], "bad input '1xax3'"),
        (["module:operator_db.examples:mlp"], "no default inputs known; give --input"),
        (["module:operator_db.examples:mlp", "-i", "8x100"], "the model raised RuntimeError: "),
        (["module:operator_db.examples:mlp", "-i", "8x784", "-b", "1,x"], "bad batch sizes"),
        (["module:operator_db.examples:mlp", "-i", "8x784", "--dtype", "int8"], "bad dtype"),
        (["module:operator_db.examples:mlp", "oops", "-i", "8x784"], "bad override 'oops'"),
        (
            ["module:operator_db.examples:mlp", "-i", "8x784", "-b", "1,2", "-o", "one.yaml"],
            "names one file for 2 batch sizes",
        ),
    ],
)
def test_errors_are_one_line(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)  # missing here, whatever is installed
    monkeypatch.chdir(tmp_path)
    code, _, exc = invoke(*args)
    assert code == 1
    assert isinstance(exc, OperatorDBError), exc
    assert message in str(exc) and "\n" not in str(exc)
    assert list(tmp_path.iterdir()) == []


def test_output_paths() -> None:
    assert output_path(Path("out"), "m-b8", 2) == Path("out/m-b8.yaml")
    assert output_path(Path("x/m.yaml"), "m-b8", 1) == Path("x/m.yaml")
    assert output_path(Path("x/m-{batch}.yml"), "m-b8", 3) == Path("x/m-8.yml")
    with pytest.raises(HarvestError):
        output_path(Path("m.yaml"), "m-b8", 2)
