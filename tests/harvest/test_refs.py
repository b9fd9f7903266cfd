from __future__ import annotations

import importlib
import sys
from typing import Any

import pytest
import torch

from operator_db.errors import HarvestError
from operator_db.harvest import load_model, parse_overrides, parse_reference
from operator_db.harvest.refs import ModelRef, default_inputs
from operator_db.specs import TensorSpec


def test_references_with_overrides_in_the_text_and_beside_it() -> None:
    ref = parse_reference(
        "transformers:BertModel?num_hidden_layers=2&hidden_act=gelu", {"vocab_size": 100}
    )
    assert ref == ModelRef(
        "transformers",
        "BertModel",
        {"num_hidden_layers": 2, "hidden_act": "gelu", "vocab_size": 100},
    )
    assert ref.text == "transformers:BertModel"
    assert ref.default_name == "bertmodel"
    assert parse_reference("module:operator_db.examples:mlp").default_name == "mlp"
    assert parse_reference("torchvision:resnet50").default_name == "resnet50"


def test_override_values_are_read_as_json_where_they_parse() -> None:
    assert parse_overrides(["a=6", "b=true", "c=[64, 64]", "d=gelu", "e=1e-5", "f=None"]) == {
        "a": 6,
        "b": True,
        "c": [64, 64],
        "d": "gelu",
        "e": 1e-5,
        "f": None,
    }
    with pytest.raises(HarvestError, match="bad override 'oops': expected key=value"):
        parse_overrides(["oops"])


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("resnet50", "expected one of torchvision:..., timm:..., transformers:..., module:..."),
        ("keras:resnet50", "expected one of"),
        ("timm:", "nothing after 'timm:'"),
        ("module:operator_db.examples", "expected module:package.module:factory"),
    ],
)
def test_bad_references(text: str, problem: str) -> None:
    with pytest.raises(HarvestError, match="bad model reference") as info:
        parse_reference(text)
    assert problem in str(info.value)


@pytest.mark.parametrize("library", ["torchvision", "timm"])
def test_a_missing_library_says_what_to_install(
    library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, library, None)  # import raises ImportError
    with pytest.raises(HarvestError) as info:
        load_model(parse_reference(f"{library}:resnet50"))
    message = str(info.value)
    assert f"install it with: pip install {library}" in message
    assert "\n" not in message


def test_a_broken_library_is_reported_like_a_missing_one(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = importlib.import_module

    def broken(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "torchvision":  # an install whose compiled ops do not match torch
            raise RuntimeError("operator torchvision::nms does not exist")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(HarvestError) as info:
        load_model(parse_reference("torchvision:resnet50"))
    assert str(info.value) == (
        "torchvision is needed for torchvision: references but cannot be imported (operator "
        "torchvision::nms does not exist); install it with: pip install torchvision"
    )


def test_transformers_models_are_built_on_meta_from_the_default_config() -> None:
    model = load_model(parse_reference("transformers:BertModel?num_hidden_layers=1"))
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert model.config.num_hidden_layers == 1
    assert model.config.hidden_size == 768  # the library default, nothing downloaded
    assert default_inputs(parse_reference("transformers:BertModel"), model) == [
        TensorSpec(name="input_ids", shape=[1, 128], dtype="int64", value_range=(0, 30522))
    ]


def test_vision_defaults() -> None:
    ref = parse_reference("transformers:ResNetModel")
    model = load_model(ref)
    assert default_inputs(ref, model) == [TensorSpec(name="pixel_values", shape=[1, 3, 224, 224])]


def test_unknown_transformers_class_suggests_names() -> None:
    with pytest.raises(
        HarvestError, match="unknown transformers class 'BertModl'; did you mean: BertModel"
    ):
        load_model(parse_reference("transformers:BertModl"))


def test_unknown_config_field_is_refused() -> None:
    with pytest.raises(
        HarvestError,
        match="BertConfig: unknown config field 'num_hidden_layer'; "
        "did you mean: num_hidden_layers",
    ):
        load_model(parse_reference("transformers:BertModel?num_hidden_layer=2"))


def test_module_factories_get_overrides_as_keyword_arguments() -> None:
    model = load_model(parse_reference("module:operator_db.examples:mlp?hidden=[32]&outputs=3"))
    assert [tuple(p.shape) for p in model.parameters()] == [(32, 784), (32,), (3, 32), (3,)]
    assert model[0].weight.device.type == "meta"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "module:no_such_package.models:f",
            "cannot import 'no_such_package.models' for module:no_such_package.models:f: "
            "ModuleNotFoundError: No module named 'no_such_package'",
        ),
        (
            "module:tests.harvest.models:mixd",
            "tests.harvest.models: unknown factory 'mixd'; did you mean: mixed, MixedNet?",
        ),
        (
            "module:tests.harvest.models:raising_factory",
            "building module:tests.harvest.models:raising_factory raised RuntimeError: "
            "factory failed",
        ),
        (
            "module:tests.harvest.models:not_a_module",
            "module:tests.harvest.models:not_a_module returned int, not a torch.nn.Module",
        ),
        (
            "module:operator_db.examples:mlp?colour=red",
            "building module:operator_db.examples:mlp raised TypeError: mlp() got an unexpected "
            "keyword argument 'colour'",
        ),
    ],
)
def test_module_reference_errors(text: str, message: str) -> None:
    with pytest.raises(HarvestError) as info:
        load_model(parse_reference(text))
    assert str(info.value) == message


def test_models_can_be_built_on_the_cpu() -> None:
    model = load_model(parse_reference("module:operator_db.examples:mlp"), device="cpu")
    assert model[0].weight.device == torch.device("cpu")
