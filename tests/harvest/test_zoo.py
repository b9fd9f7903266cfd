"""The harvest zoo: models of many families harvested whole, by default, at two batch sizes.

Each model is built from its library's default config with small overrides (nothing is
downloaded) and harvested with the defaults, custom leaf modules traced: no call is opaque, the
FlopCounterMode part of Σ count × FLOPs agrees with FlopCounterMode on the same forward pass
(meta device; the CPU for a model that needs data), every configuration is rebuilt by ``ops``,
runs on the CPU and gives the model's outputs, and each call the spec cannot describe is listed
with where it ran and why. README.md lists the families from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from pydantic import JsonValue
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from operator_db.harvest import HarvestResult, harvest, load_model, parse_reference
from operator_db.harvest.inputs import ModelInputs
from operator_db.specs import TensorSpec
from tests.harvest.test_harvest import assert_no_double_counting, assert_round_trip

TEXT = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 2,
    "intermediate_size": 128,
}
DECODER = {**TEXT, "num_key_value_heads": 1}
SEQ2SEQ = {
    "encoder_layers": 1,
    "decoder_layers": 1,
    "d_model": 64,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
}
STAGES = {"depths": [1, 1, 1, 1], "hidden_sizes": [16, 32, 64, 128]}
PATCHES = {**TEXT, "image_size": 32, "patch_size": 8}


def ids(length: int = 32, name: str = "input_ids") -> TensorSpec:
    return TensorSpec(name=name, shape=[1, length], dtype="int64")


def pixels(size: int) -> TensorSpec:
    return TensorSpec(name="pixel_values", shape=[1, 3, size, size])


@dataclass(frozen=True)
class Case:
    """A model of the zoo: reference, overrides, inputs at batch size 1, custom leaves traced."""

    reference: str
    overrides: dict[str, JsonValue] = field(default_factory=dict)
    inputs: tuple[TensorSpec, ...] = (ids(),)
    traced: frozenset[str] = frozenset()
    """Class names of the custom leaf modules it has (traced, never opaque)."""
    family: str = ""

    @property
    def id(self) -> str:
        return self.reference.rpartition(":")[2]


def _case(
    reference: str, overrides: dict[str, JsonValue], *inputs: TensorSpec, **kw: object
) -> Case:
    traced = frozenset(str(kw.pop("traced", "")).split()) - {""}
    return Case(reference, overrides, inputs or (ids(),), traced, str(kw.pop("family", "")))


T = "transformers:"
ZOO = [
    # encoders
    _case(T + "BertModel", TEXT, family="encoder", traced="GELUActivation"),
    _case(
        T + "DistilBertModel",
        {"n_layers": 2, "dim": 64, "n_heads": 2, "hidden_dim": 128},
        traced="GELUActivation",
    ),
    _case(T + "RobertaModel", TEXT, traced="GELUActivation"),
    _case(T + "AlbertModel", {**TEXT, "embedding_size": 32}, traced="NewGELUActivation"),
    _case(T + "ElectraModel", {**TEXT, "embedding_size": 32}, traced="GELUActivation"),
    _case(T + "DebertaV2Model", TEXT, traced="GELUActivation"),  # needs data: the CPU
    _case(
        T + "MobileBertModel",
        {**TEXT, "embedding_size": 32, "intra_bottleneck_size": 32, "true_hidden_size": 32},
        traced="NoNorm",
    ),
    # decoders
    _case(
        T + "GPT2Model",
        {"n_layer": 2, "n_embd": 64, "n_head": 2},
        traced="Conv1D NewGELUActivation",
    ),
    _case(
        T + "GPTNeoModel",
        {
            "num_layers": 2,
            "hidden_size": 64,
            "num_heads": 2,
            "attention_types": [[["global", "local"], 1]],
        },
        traced="NewGELUActivation",
    ),
    _case(
        T + "GPTJModel",
        {"n_layer": 2, "n_embd": 64, "n_head": 2, "rotary_dim": 16},
        traced="GPTJRotaryEmbedding NewGELUActivation",
    ),
    _case(
        T + "OPTModel",
        {
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 2,
            "ffn_dim": 128,
            "word_embed_proj_dim": 64,
        },
        traced="OPTLearnedPositionalEmbedding",
    ),
    _case(T + "LlamaModel", DECODER, traced="LlamaRMSNorm LlamaRotaryEmbedding SiLUActivation"),
    _case(
        T + "MistralModel", DECODER, traced="MistralRMSNorm MistralRotaryEmbedding SiLUActivation"
    ),
    _case(T + "Qwen2Model", DECODER, traced="Qwen2RMSNorm Qwen2RotaryEmbedding SiLUActivation"),
    _case(
        T + "GemmaModel",
        {**DECODER, "head_dim": 32},
        traced="GemmaRMSNorm GemmaRotaryEmbedding GemmaTextScaledWordEmbedding GELUTanh",
    ),
    _case(T + "Phi3Model", DECODER, traced="Phi3RMSNorm Phi3RotaryEmbedding SiLUActivation"),
    _case(
        T + "FalconModel",
        {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2},
        traced="FalconLinear FalconRotaryEmbedding GELUActivation",
    ),
    _case(T + "BloomModel", {"n_layer": 2, "hidden_size": 64, "n_head": 2}, traced="BloomGelu"),
    # encoder-decoders
    _case(
        T + "T5Model",
        {"num_layers": 2, "d_model": 64, "d_ff": 128, "num_heads": 2, "d_kv": 32},
        ids(),
        ids(8, "decoder_input_ids"),
        traced="T5LayerNorm",
    ),
    _case(
        T + "BartModel",
        # With SDPA, Bart's mask needs data: it runs on the CPU, where FlopCounterMode does not
        # count fused attention (docs/harvest.md). Eager attention runs on the meta device.
        {**SEQ2SEQ, "attn_implementation": "eager"},
        ids(),
        ids(8, "decoder_input_ids"),
        traced="BartLearnedPositionalEmbedding BartScaledWordEmbedding GELUActivation",
    ),
    _case(
        T + "WhisperModel",
        {**SEQ2SEQ, "num_mel_bins": 16, "max_source_positions": 32},
        TensorSpec(name="input_features", shape=[1, 16, 64]),
        ids(8, "decoder_input_ids"),
        traced="GELUActivation WhisperPositionalEmbedding",
    ),
    # vision CNNs
    _case(T + "ResNetModel", {**STAGES, "embedding_size": 16}, pixels(64)),
    _case(T + "RegNetModel", {**STAGES, "embedding_size": 16}, pixels(64)),
    _case(T + "MobileNetV2Model", {"depth_multiplier": 0.35, "image_size": 64}, pixels(64)),
    _case(
        T + "ConvNextModel",
        {**STAGES, "image_size": 64},
        pixels(64),
        traced="ConvNextLayerNorm GELUActivation",
    ),
    _case(
        T + "PoolFormerModel",
        STAGES,
        pixels(64),
        traced="GELUActivation PoolFormerDropPath PoolFormerGroupNorm",
    ),
    # vision transformers and hybrids
    _case(T + "ViTModel", PATCHES, pixels(32), traced="GELUActivation"),
    _case(T + "DeiTModel", PATCHES, pixels(32), traced="GELUActivation"),
    _case(T + "BeitModel", PATCHES, pixels(32), traced="BeitDropPath GELUActivation"),
    _case(T + "CLIPVisionModel", PATCHES, pixels(32), traced="QuickGELUActivation"),
    _case(
        T + "SwinModel",
        {
            "depths": [1, 1],
            "num_heads": [2, 4],
            "embed_dim": 32,
            "image_size": 64,
            "patch_size": 4,
            "window_size": 4,
        },
        pixels(64),
        traced="GELUActivation SwinDropPath SwinRelativePositionBias",
    ),
    _case(
        T + "SegformerModel",
        {**STAGES, "num_attention_heads": [1, 1, 2, 4]},
        pixels(64),
        traced="GELUActivation SegformerDropPath",
    ),
    _case(
        T + "MobileViTModel",
        {
            "image_size": 64,
            "hidden_sizes": [32, 48, 64],
            "neck_hidden_sizes": [8, 16, 24, 24, 32, 40, 64],
        },
        pixels(64),
        traced="SiLUActivation",
    ),
    _case(
        T + "LevitModel",
        {
            "image_size": 64,
            "hidden_sizes": [32, 48, 64],
            "num_attention_heads": [1, 2, 2],
            "depths": [1, 1, 1],
            "key_dim": [8, 8, 8],
        },
        pixels(64),
        traced="LevitSubsample",
    ),
    # the project's own
    _case("module:operator_db.examples:mlp", {"hidden": [64, 64]}, TensorSpec(shape=[1, 784])),
    _case(
        "module:tests.harvest.models:mixed",
        {},
        TensorSpec(shape=[1, 3, 32, 32]),
        traced="Scale SquaredReLU",
    ),
    _case(
        "module:tests.harvest.models:mostly_custom",
        {"width": 64},
        TensorSpec(shape=[1, 64]),
        traced="BigMatmul",
    ),
]


def _flop_counter(model: nn.Module, inputs: list[TensorSpec], device: str) -> int:
    """FlopCounterMode over one forward pass of ``model`` on ``device`` with these inputs."""
    args, kwargs = ModelInputs.of(inputs).materialize(torch.device(device), None)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.eval()(*args, **kwargs)
    return counter.get_total_flops()


def _check(case: Case, result: HarvestResult, model: nn.Module) -> None:
    assert result.opaque == [], result.opaque
    assert result.warnings == [] or all("no FLOP rule" in w for w in result.warnings)
    assert {t.op.rpartition(".")[2] for t in result.traced} == case.traced
    for skipped in result.skipped:  # listed, with where and why: empty tensors (a KV cache)
        assert skipped.locations and "is empty (a spec's dimensions are positive)" in skipped.reason
    expected = _flop_counter(model, list(result.spec.model.inputs), result.device)
    assert expected > 0
    assert result.counter_flops == pytest.approx(expected, rel=0.01)
    assert result.flops >= result.counter_flops
    assert_no_double_counting(result.spec)
    assert_round_trip(result.spec)


@pytest.mark.parametrize("case", ZOO, ids=lambda c: c.id)
def test_the_zoo_harvests_whole_at_two_batch_sizes(case: Case) -> None:
    ref = parse_reference(case.reference, case.overrides)
    model = load_model(ref)
    flops = []
    for batch in (1, 2):
        inputs = [t.model_copy(update={"shape": [batch, *t.shape[1:]]}) for t in case.inputs]
        result = harvest(model, inputs, reference=ref)
        if result.device == "cpu":  # it needed data: FlopCounterMode runs on a CPU build too
            model = load_model(ref, device="cpu")
        _check(case, result, model)
        flops.append(result.counter_flops)
    assert flops[1] > flops[0]
