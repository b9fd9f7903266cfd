"""Model references: ``torchvision:NAME``, ``timm:NAME``, ``transformers:CLASS``, ``module:...``.

A reference may carry keyword overrides after ``?`` (``transformers:BertModel?num_hidden_layers=6``,
``module:operator_db.examples:mlp?hidden=[64,64]``); values are read as JSON where they parse
(numbers, booleans, lists), else as strings. Models are built under ``torch.device("meta")``: no
weights are allocated and nothing is downloaded (transformers models get their library's default
config, never ``from_pretrained``). Libraries are imported only when a reference needs them.
"""

from __future__ import annotations

import difflib
import importlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from urllib.parse import parse_qsl

import torch
from pydantic import JsonValue
from torch import nn

from operator_db.errors import HarvestError
from operator_db.specs.schema import TensorSpec

SCHEMES = ("torchvision", "timm", "transformers", "module")
_INSTALL = {"torchvision": "torchvision", "timm": "timm", "transformers": "transformers"}


@dataclass(frozen=True)
class ModelRef:
    """A parsed model reference: scheme, target and keyword overrides."""

    scheme: str
    target: str
    overrides: dict[str, JsonValue] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The reference without its overrides (``transformers:BertModel``)."""
        return f"{self.scheme}:{self.target}"

    @property
    def default_name(self) -> str:
        """A model name derived from the reference (``resnet50``, ``bertmodel``, ``mlp``)."""
        last = self.target.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
        return model_name_part(last) or self.scheme


def model_name_part(text: str) -> str:
    """Return ``text`` as (part of) a model name; empty where nothing is left.

    Lower case, each character a spec's name does not allow (``_``, spaces, ...) a ``-``,
    starting with a letter or digit: ``_Tiny`` → ``tiny``, ``functional_transformer`` →
    ``functional-transformer``.
    """
    return re.sub(r"[^a-z0-9._:+@-]", "-", text.lower()).lstrip("._:+@-")


def parse_value(text: str) -> JsonValue:
    """Read an override value: JSON if it parses (``6``, ``true``, ``[64, 64]``), else a string."""
    try:
        value: JsonValue = json.loads(text)
    except json.JSONDecodeError:
        lowered = text.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        if lowered in ("none", "null"):
            return None
        return text
    return value


def parse_overrides(items: list[str] | None) -> dict[str, JsonValue]:
    """Parse ``key=value`` strings into overrides.

    Raises:
        HarvestError: an item has no ``=`` or an empty key.
    """
    found: dict[str, JsonValue] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise HarvestError(f"bad override {item!r}: expected key=value")
        found[key.strip()] = parse_value(value)
    return found


def parse_reference(text: str, overrides: Mapping[str, JsonValue] | None = None) -> ModelRef:
    """Parse ``SCHEME:TARGET[?key=value&...]``; ``overrides`` are added to those in the text.

    Raises:
        HarvestError: an unknown scheme or an empty target.
    """
    scheme, sep, rest = text.partition(":")
    if not sep or scheme not in SCHEMES:
        raise HarvestError(
            f"bad model reference {text!r}: expected one of "
            + ", ".join(f"{s}:..." for s in SCHEMES)
        )
    target, _, query = rest.partition("?")
    if not target.strip():
        raise HarvestError(f"bad model reference {text!r}: nothing after '{scheme}:'")
    found: dict[str, JsonValue] = {
        k: parse_value(v) for k, v in parse_qsl(query, keep_blank_values=True, strict_parsing=False)
    }
    found.update(overrides or {})
    if scheme == "module" and target.count(":") != 1:
        raise HarvestError(f"bad model reference {text!r}: expected module:package.module:factory")
    return ModelRef(scheme, target.strip(), found)


def _import(library: str) -> ModuleType:
    try:
        return importlib.import_module(library)
    except Exception as exc:  # noqa: BLE001 - a broken install raises more than ImportError
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HarvestError(
            f"{library} is needed for {library}: references but cannot be imported ({detail}); "
            f"install it with: pip install {_INSTALL[library]}"
        ) from None


def _close(name: str, names: list[str], what: str) -> str:
    near = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
    if near:
        return f"unknown {what} {name!r}; did you mean: {', '.join(near)}?"
    sample = ", ".join(sorted(names)[:8])
    return f"unknown {what} {name!r} ({len(names)} known, e.g. {sample})"


def _call(factory: Callable[..., Any], what: str, **kwargs: Any) -> nn.Module:
    try:
        model = factory(**kwargs)
    except HarvestError:
        raise
    except Exception as exc:  # noqa: BLE001 - a model constructor may raise anything
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise HarvestError(f"building {what} raised {type(exc).__name__}: {text[:300]}") from None
    if not isinstance(model, nn.Module):
        raise HarvestError(f"{what} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def _torchvision(ref: ModelRef) -> nn.Module:
    tv = _import("torchvision")
    names = list(tv.models.list_models())
    if ref.target not in names:
        raise HarvestError(_close(ref.target, names, "torchvision model"))
    return _call(tv.models.get_model, ref.text, name=ref.target, weights=None, **ref.overrides)


def _timm(ref: ModelRef) -> nn.Module:
    timm = _import("timm")
    names = list(timm.list_models())
    if ref.target not in names:
        raise HarvestError(_close(ref.target, names, "timm model"))
    return _call(
        timm.create_model, ref.text, model_name=ref.target, pretrained=False, **ref.overrides
    )


def transformers_config(ref: ModelRef) -> Any:
    """Return the default config of a transformers model class with the overrides applied.

    Raises:
        HarvestError: the class or an override key is unknown.
    """
    transformers = _import("transformers")
    cls = getattr(transformers, ref.target, None)
    if cls is None or not isinstance(cls, type):
        names = [
            n
            for n in dir(transformers)
            if n.endswith(("Model", "ForCausalLM")) or n.startswith("AutoModel")
        ]
        raise HarvestError(_close(ref.target, names, "transformers class"))
    config_class = getattr(cls, "config_class", None)
    if config_class is None:
        raise HarvestError(f"transformers:{ref.target} has no config_class; use a *Model class")
    default = config_class()
    unknown = [
        k for k in ref.overrides if not hasattr(default, k) and k not in ("attn_implementation",)
    ]
    if unknown:
        known = [k for k in vars(default) if not k.startswith("_")]
        raise HarvestError(f"{config_class.__name__}: " + _close(unknown[0], known, "config field"))
    try:
        return config_class(**ref.overrides)
    except Exception as exc:  # noqa: BLE001 - config validation may raise anything
        raise HarvestError(
            f"{config_class.__name__}({ref.overrides}) raised "
            f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        ) from None


def _transformers(ref: ModelRef) -> nn.Module:
    config = transformers_config(ref)
    import transformers  # imported by transformers_config

    cls = getattr(transformers, ref.target)
    return _call(cls, ref.text, config=config)


def _module(ref: ModelRef) -> nn.Module:
    module_name, _, factory_name = ref.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - an import may raise anything
        raise HarvestError(
            f"cannot import {module_name!r} for {ref.text}: {type(exc).__name__}: {exc}"
        ) from None
    factory = getattr(module, factory_name, None)
    if factory is None or not callable(factory):
        names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
        raise HarvestError(f"{module_name}: " + _close(factory_name, names, "factory"))
    return _call(factory, ref.text, **ref.overrides)


_LOADERS: dict[str, Callable[[ModelRef], nn.Module]] = {
    "torchvision": _torchvision,
    "timm": _timm,
    "transformers": _transformers,
    "module": _module,
}


def load_model(ref: ModelRef, *, device: str = "meta") -> nn.Module:
    """Build the referenced model on ``device`` (``meta``: no weight memory; ``cpu``: real weights).

    Raises:
        HarvestError: the library is missing, the name is unknown, or the constructor raised.
    """
    with torch.device(device):
        return _LOADERS[ref.scheme](ref)


def default_inputs(ref: ModelRef, model: nn.Module) -> list[TensorSpec] | None:
    """Return the inputs a reference's model takes by default at batch size 1, or None if unknown.

    transformers: ``input_ids`` [1, 128] int64 in [0, vocab_size), ``pixel_values`` [1, channels,
    image_size, image_size] (224 when the config has no size); torchvision: [1, 3, 224, 224]; timm:
    its default config's input size.
    """
    if ref.scheme == "transformers":
        config = getattr(model, "config", None)
        main = getattr(model, "main_input_name", None)
        if main == "input_ids" and config is not None:
            vocab = int(getattr(config, "vocab_size", 0) or 0)
            return [
                TensorSpec(
                    name="input_ids",
                    shape=[1, 128],
                    dtype="int64",
                    value_range=(0, vocab) if vocab > 0 else None,
                )
            ]
        if main == "pixel_values" and config is not None:
            size = getattr(config, "image_size", 224)
            size = size if isinstance(size, int) else 224
            channels = int(getattr(config, "num_channels", 3) or 3)
            return [TensorSpec(name="pixel_values", shape=[1, channels, size, size])]
        return None
    if ref.scheme == "torchvision":
        return [TensorSpec(shape=[1, 3, 224, 224])]
    if ref.scheme == "timm":
        cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", {}) or {}
        size = cfg.get("input_size", (3, 224, 224))
        return [TensorSpec(shape=[1, *(int(s) for s in size)])]
    return None


def complete_inputs(ref: ModelRef, model: nn.Module, inputs: list[TensorSpec]) -> list[TensorSpec]:
    """Give a transformers ``input_ids`` input without a range the model's ``[0, vocab_size)``."""
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if ref.scheme != "transformers" or not isinstance(vocab, int) or vocab <= 0:
        return inputs
    return [
        t.model_copy(update={"value_range": (0, vocab)})
        if t.name == "input_ids" and t.value_range is None and t.dtype.startswith("int")
        else t
        for t in inputs
    ]
