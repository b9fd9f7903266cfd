"""The named sets of models a study runs: which models, at which batch sizes, in which modes.

A set is a plan, not a result: ``opdb study --set NAME`` harvests each model at each batch size
(inference, and training at ``training_batch_sizes``), stores the specs and measures the whole
models. Every model comes from ``transformers``' default configurations (built on the meta device:
nothing is downloaded) or from :mod:`operator_db.examples`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from operator_db.errors import InvalidInputError


@dataclass(frozen=True)
class StudyModel:
    """One model of a study: a harvest reference and what it is called in the database."""

    name: str
    """Base name; a spec is named ``NAME-bB`` (inference) or ``NAME-train-bB`` (training)."""
    reference: str
    """A harvest reference (``transformers:CLASS``, ``module:pkg.mod:factory``...)."""
    inputs: tuple[str, ...] = ()
    """Inputs as for ``opdb harvest -i`` at batch 1 (empty: the reference's defaults)."""
    overrides: dict[str, object] = field(default_factory=dict)
    """Config or factory overrides (``opdb harvest REF key=value``)."""
    kind: str = ""
    """What it is, for the reader: "CNN", "transformer encoder", ..."""


@dataclass(frozen=True)
class StudySet:
    """Models and the batch sizes and modes to measure them at."""

    name: str
    description: str
    models: tuple[StudyModel, ...]
    batch_sizes: tuple[int, ...]
    """Batch sizes of the inference (forward) runs."""
    training_batch_sizes: tuple[int, ...]
    """Batch sizes of the training-step (forward + backward + SGD step) runs; () for none."""


_TEXT = "transformers:"
_OWN = "module:operator_db.examples:"

CPU_MODELS = (
    StudyModel("mlp", f"{_OWN}mlp", ("1x784",), kind="MLP (ours)"),
    StudyModel(
        "ftransformer",
        f"{_OWN}functional_transformer",
        ("1x128x256",),
        kind="transformer (ours, functional)",
    ),
    StudyModel("mobilenetv2", f"{_TEXT}MobileNetV2Model", kind="CNN"),
    StudyModel("resnet50", f"{_TEXT}ResNetModel", kind="CNN"),
    StudyModel("convnext-tiny", f"{_TEXT}ConvNextModel", kind="CNN"),
    StudyModel("regnet", f"{_TEXT}RegNetModel", kind="CNN"),
    StudyModel("vit-base", f"{_TEXT}ViTModel", kind="vision transformer"),
    StudyModel("swin-tiny", f"{_TEXT}SwinModel", kind="vision transformer"),
    StudyModel("bert-base", f"{_TEXT}BertModel", kind="transformer encoder"),
    StudyModel("distilbert", f"{_TEXT}DistilBertModel", kind="transformer encoder"),
    StudyModel("gpt2", f"{_TEXT}GPT2Model", kind="transformer decoder"),
)
"""Eleven models from 0.27 M to 124 M parameters: two of ours, four CNNs, five transformers."""

SETS: dict[str, StudySet] = {
    "cpu": StudySet(
        name="cpu",
        description="11 models (CNNs and transformers, 0.27 M to 124 M parameters) at batch 1, 2 "
        "and 4, training steps at batch 2: about 15 minutes on a 2-core CPU",
        models=CPU_MODELS,
        batch_sizes=(1, 2, 4),
        training_batch_sizes=(2,),
    ),
    "gpu": StudySet(
        name="gpu",
        description="the same 11 models at batch 1, 64 and 256 (the seeds' sizes), training steps "
        "at batch 64: for a GPU host",
        models=CPU_MODELS,
        batch_sizes=(1, 64, 256),
        training_batch_sizes=(64,),
    ),
}
"""The named sets (``opdb study --set NAME``); ``cpu`` is the default on a CPU, ``gpu`` on a GPU."""


def get_set(name: str) -> StudySet:
    """Return the named set.

    Raises:
        InvalidInputError: no set of that name (the message lists them).
    """
    try:
        return SETS[name]
    except KeyError:
        raise InvalidInputError(
            f"unknown study set {name!r}: choose one of {', '.join(sorted(SETS))}"
        ) from None
