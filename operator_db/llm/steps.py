"""One step of a causal LM's generation as a model: the prefill, or a decode step over a cache.

``transformers``' ``generate()`` calls the model once over the prompt (the prefill) and then once
per new token with the key/value cache of every token before it (a decode step). A
:class:`GenerationStep` is one such call, made a module whose ``forward`` takes the tensors
``generate()`` passes (``input_ids``, ``attention_mask``, ...) and calls the model exactly as
``generate()`` does:

- the keyword arguments are those ``generate()`` passes, learnt by running ``generate()`` itself
  with the model's forward replaced by a recorder (:func:`generate_calls`): the cache object,
  ``use_cache``, ``logits_to_keep=1`` where the model takes it (the LM head on the last position
  only), ``return_dict``;
- a decode step's cache holds ``tokens`` tokens, laid out as the model's own prefill lays it
  (its layer types, shapes and dtypes come from a prefill of that length on the meta device), with
  random values (time does not depend on them); its tensors are the step's buffers, so that
  ``.to(dtype)``, ``.to(device)`` and a harvest's parameter swap carry them;
- before each call the cache is put back as it was (each layer's attributes restored, no tensor
  copied), so that every call is the same step: the cache does not grow from call to call.

The step is built from a model reference (``module:operator_db.llm.steps:step`` with the LM's
reference, its overrides, the phase, the batch and the token count as keyword arguments), so the
harvest, the worker's whole-model run, its hollow run and the replay treat it as any model.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import Any, Literal

import torch
from pydantic import JsonValue
from torch import nn

from operator_db.errors import HarvestError
from operator_db.harvest.refs import load_model, parse_reference
from operator_db.specs.schema import TensorSpec

Phase = Literal["prefill", "decode"]
STEP_REFERENCE = "module:operator_db.llm.steps:step"
"""The model reference of a generation step (its keyword arguments: :func:`step`)."""

_MAX_LENGTH_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def step(
    model: str,
    overrides: Mapping[str, JsonValue] | None = None,
    phase: Phase = "decode",
    batch: int = 1,
    tokens: int = 128,
) -> GenerationStep:
    """Return one step of generating with ``model`` (a causal LM reference) at ``batch`` sequences.

    ``phase="prefill"``: the first forward over a prompt of ``tokens`` tokens, into an empty cache.
    ``phase="decode"``: one new token per sequence over a cache of ``tokens`` tokens (the
    context), as ``generate()`` calls it. Built on the current device (``torch.device(...)``).

    Raises:
        HarvestError: not a causal LM, a bad phase or size, or a context past the model's maximum.
    """
    if phase not in ("prefill", "decode"):
        raise HarvestError(f"bad generation phase {phase!r}: expected prefill or decode")
    if batch < 1 or tokens < 1:
        raise HarvestError(f"batch ({batch}) and tokens ({tokens}) must be positive")
    ref = parse_reference(model, dict(overrides or {}))
    device = torch.get_default_device()
    lm = load_model(ref, device=str(device))
    check_causal_lm(lm, model)
    check_context(lm, tokens + 1, model)
    return GenerationStep(lm, phase, batch, tokens, meta_twin=lambda: load_model(ref))


def check_causal_lm(lm: nn.Module, name: str) -> None:
    """Refuse a model ``generate()`` cannot run token by token over a cache, in one line.

    Raises:
        HarvestError: no ``generate``, an encoder-decoder, or no key/value cache.
    """
    config = getattr(lm, "config", None)
    if not callable(getattr(lm, "generate", None)) or config is None:
        raise HarvestError(f"{name} is not a causal LM: it has no generate() (use a *ForCausalLM)")
    if getattr(config, "is_encoder_decoder", False):
        raise HarvestError(
            f"{name} is an encoder-decoder; only decoder-only causal LMs generate here"
        )
    if getattr(config, "use_cache", True) is False:
        raise HarvestError(f"{name} has use_cache=False: generate() would not keep a cache")


def max_context(lm: nn.Module) -> int | None:
    """Return the longest sequence the model's config allows (tokens), or None if it says none."""
    config = getattr(lm, "config", None)
    for name in _MAX_LENGTH_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_context(lm: nn.Module, tokens: int, name: str) -> None:
    """Refuse a sequence of ``tokens`` longer than the model's maximum, in one line.

    Raises:
        HarvestError: the sequence is longer than the model's ``max_position_embeddings``.
    """
    limit = max_context(lm)
    if limit is not None and tokens > limit:
        raise HarvestError(
            f"a context of {tokens} tokens is longer than {name}'s maximum of {limit} "
            "(max_position_embeddings)"
        )


def _recording_forward(lm: nn.Module, calls: list[dict[str, Any]]) -> Any:
    """Return a stand-in for ``lm.forward`` that records its keyword arguments and computes nothing.

    It keeps the forward's signature (``generate()`` reads it to decide ``logits_to_keep``) and
    returns logits of one position per sequence, zeros, and the cache it was given, unchanged.
    """
    from transformers.modeling_outputs import CausalLMOutputWithPast

    vocab = int(text_config(lm).vocab_size)

    @functools.wraps(lm.forward)
    def forward(*args: Any, **kwargs: Any) -> Any:
        calls.append(dict(kwargs))
        ids: Any = kwargs.get("input_ids", args[0] if args else None)
        logits = torch.zeros(ids.shape[0], 1, vocab, device=ids.device)
        return CausalLMOutputWithPast(logits=logits, cache=kwargs.get("cache"))

    return forward


def text_config(lm: nn.Module) -> Any:
    """Return the config of ``lm``'s text part (its own config for a text-only model)."""
    config: Any = lm.config
    return config.get_text_config()


def generation_kwargs(lm: nn.Module, new_tokens: int) -> dict[str, Any]:
    """Return the arguments of a greedy ``generate()`` of exactly ``new_tokens`` tokens."""
    config: Any = lm.generation_config
    pad = config.pad_token_id
    if pad is None:
        eos = config.eos_token_id
        pad = (eos[0] if isinstance(eos, list) else eos) if eos is not None else 0
    return {
        "max_new_tokens": new_tokens,
        "min_new_tokens": new_tokens,
        "do_sample": False,
        "num_beams": 1,
        "pad_token_id": pad,
    }


def generate_calls(lm: nn.Module, batch: int, prompt: int, new_tokens: int) -> list[dict[str, Any]]:
    """Return the keyword arguments of each forward ``generate()`` makes, computing nothing.

    ``generate()`` runs for real (its logits processors, stopping checks, cache set-up) with the
    model's forward replaced by a recorder that returns zero logits. On the meta device the
    prompt lives on the CPU (``generate()`` itself reads values).

    Raises:
        HarvestError: ``generate()`` raised (a custom generation loop, an unsupported cache).
    """
    device = _device_of(lm)
    where = torch.device("cpu") if device.type == "meta" else device
    ids = torch.zeros(batch, prompt, dtype=torch.long, device=where)
    calls: list[dict[str, Any]] = []
    lm.forward = _recording_forward(lm, calls)
    generate: Any = lm.generate
    try:
        with torch.no_grad():
            generate(ids, attention_mask=torch.ones_like(ids), **generation_kwargs(lm, new_tokens))
    except HarvestError:
        raise
    except Exception as exc:  # noqa: BLE001 - generate() and the model's code may raise anything
        text = (str(exc).strip().splitlines() or [""])[0][:300]
        raise HarvestError(
            f"generate() of {type(lm).__name__} cannot be captured: {type(exc).__name__}: {text}"
        ) from None
    finally:
        del lm.forward
    if len(calls) != new_tokens:
        raise HarvestError(
            f"generate() of {type(lm).__name__} made {len(calls)} forward calls for "
            f"{new_tokens} new tokens: a custom generation loop cannot be captured"
        )
    return calls


def _device_of(lm: nn.Module) -> torch.device:
    for t in (*lm.parameters(), *lm.buffers()):
        return t.device
    return torch.device("cpu")


class GenerationStep(nn.Module):
    """One forward of a causal LM as ``generate()`` makes it (the module documentation says how)."""

    def __init__(
        self,
        lm: nn.Module,
        phase: Phase,
        batch: int,
        tokens: int,
        *,
        meta_twin: Any = None,
    ) -> None:
        super().__init__()
        self.lm = lm
        self.phase: Phase = phase
        self.batch = batch
        self.tokens = tokens
        calls = generate_calls(lm, batch, tokens, 1 if phase == "prefill" else 2)
        call = calls[-1]
        cache = call.get("cache")
        self._tensors = {k: v for k, v in call.items() if isinstance(v, torch.Tensor)}
        self._constants = {
            k: v for k, v in call.items() if k != "cache" and not isinstance(v, torch.Tensor)
        }
        self._cache = cache
        self._layers: list[tuple[Any, dict[str, Any], list[str]]] = []
        if cache is None:
            raise HarvestError(f"generate() of {type(lm).__name__} passes no cache to the model")
        if phase == "decode":
            cache = self._filled_cache(lm, meta_twin)
            self._cache = cache
        self._snapshot(cache)

    def _filled_cache(self, lm: nn.Module, meta_twin: Any) -> Any:
        """Return ``generate()``'s cache after a prefill of ``tokens`` tokens, values random.

        The prefill runs on the meta device (a twin of the model there, or the model itself):
        it lays out every layer as the model does (sliding windows included); the tensors are
        then allocated on the model's device.
        """
        device = _device_of(lm)
        twin = lm if device.type == "meta" or meta_twin is None else meta_twin()
        cache = copy.deepcopy(self._cache)
        ids = torch.zeros(self.batch, self.tokens, dtype=torch.long, device="meta")
        with torch.no_grad(), torch.device("meta"):
            # No attention mask: all ones is no mask, and the meta device cannot read one.
            twin(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        generator = torch.Generator(device=device if device.type != "meta" else "cpu")
        generator.manual_seed(0)
        for layer in getattr(cache, "layers", []):
            for name, value in list(vars(layer).items()):
                if isinstance(value, torch.device):
                    setattr(layer, name, device)
                elif isinstance(value, torch.Tensor) and value.device.type == "meta":
                    setattr(layer, name, _like(value, device, generator))
        return cache

    def _snapshot(self, cache: Any) -> None:
        """Keep each cache layer's attributes; its tensors become buffers of this module."""
        for i, layer in enumerate(getattr(cache, "layers", [])):
            state = dict(vars(layer))
            names = []
            for name, value in state.items():
                if isinstance(value, torch.Tensor) and value.numel() > 0:
                    buffer = f"cache_{i}_{name.strip('_')}"
                    self.register_buffer(buffer, value, persistent=False)
                    names.append(name)
            self._layers.append((layer, state, names))

    def _restore(self) -> Any:
        """Put the cache back as it was before the step (attributes only: no copy), return it."""
        for i, (layer, state, names) in enumerate(self._layers):
            layer.__dict__.clear()
            layer.__dict__.update(state)
            for name in names:
                setattr(layer, name, getattr(self, f"cache_{i}_{name.strip('_')}"))
        return self._cache

    def example_inputs(self) -> list[TensorSpec]:
        """Return the tensors ``generate()`` passes at this step, as the spec's named inputs.

        Token ids are drawn from the vocabulary; other integer tensors (positions, masks of ones)
        from the range of the values ``generate()`` passed.
        """
        vocab = int(text_config(self.lm).vocab_size)
        found = []
        for name, value in self._tensors.items():
            dtype = str(value.dtype).removeprefix("torch.")
            spec: dict[str, Any] = {"name": name, "shape": list(value.shape), "dtype": dtype}
            if name == "input_ids":
                spec["value_range"] = (0, vocab)
            elif (
                not value.is_floating_point()
                and value.dtype != torch.bool
                and value.device.type != "meta"
                and value.numel()
            ):
                spec["value_range"] = (int(value.min()), int(value.max()) + 1)
            found.append(TensorSpec.model_validate(spec))
        return found

    def cache_bytes(self) -> int:
        """Return the bytes of the cache the step starts from (0 for a prefill)."""
        return sum(
            b.numel() * b.element_size() for n, b in self.named_buffers() if n.startswith("cache_")
        )

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        """Run the step on ``inputs`` (named as :meth:`example_inputs`); return its logits."""
        cache = self._restore()
        out: Any = self.lm(**inputs, **self._constants, cache=cache)
        logits: torch.Tensor = out.logits if hasattr(out, "logits") else out[0]
        return logits


def _like(value: torch.Tensor, device: torch.device, generator: torch.Generator) -> torch.Tensor:
    """Return a tensor of ``value``'s shape and dtype on ``device``: normal floats, else zeros."""
    if device.type == "meta":
        return torch.empty_like(value, device=device)
    if value.is_floating_point():
        draw = torch.randn(value.shape, generator=generator, device=device, dtype=torch.float32)
        return draw.to(value.dtype)
    return torch.zeros(value.shape, dtype=value.dtype, device=device)
