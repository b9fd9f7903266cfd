"""NeuSight's whole-model labels: which run a file is, the model NeuSight built for it, its spec.

A label is ``label/<Device>/<model>-<inf|train>-<seqlen>-<batch>[-<suffix>].json.gz`` (the
measured latencies) with, for most, a ``.csv.gz`` of the same name (the per-node trace of the
model with one layer). NeuSight built each model from ``data/DLmodel_configs/<model>.json`` as
its tracing code does (``neusight/Tracing/trace.py``, ``get_model``): by the config's family,
not by its ``architectures`` entry —

- BERT: ``AutoModelForSequenceClassification`` (``BertForSequenceClassification``, 2 labels) for
  inference, ``AutoModelForPreTraining`` (``BertForPreTraining``) for training;
- GPT-2 / GPT-3 and OPT: ``AutoModelForCausalLM`` (``GPT2LMHeadModel``, ``OPTForCausalLM``);
- Switch: ``AutoModelForSeq2SeqLM``, with its sparse MLP's ``forward`` replaced by NeuSight's own.

always with ``attn_implementation="eager"``, fp32, ``input_ids`` of ones of shape (batch,
seqlen), ``model.eval()`` and ``torch.no_grad()`` for inference, ``model.train()`` for training
(forward, cross-entropy of the logits against the inputs, ``loss.backward()``; no optimizer).

Torch-free: the harvest itself is ``scripts/neusight_specs.py``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

LABEL_DIR = "label"
MODEL_CONFIG_DIR = "data/DLmodel_configs"
SPEC_PREFIX = "neusight"
_LABEL = re.compile(
    r"^(?P<model>[A-Za-z0-9_]+)-(?P<mode>inf|train)-(?P<seqlen>\d+)-(?P<batch>\d+)"
    r"(?:-(?P<suffix>[A-Za-z0-9_]+))?\.json(?:\.gz)?$"
)
SKIPPED_SUFFIXES = {
    "fusion": "a torch.compile run (-fusion), not the eager model the spec describes",
    "dp4": "a 4-GPU Megatron-LM training run (data parallel), not one GPU",
    "tp4": "a 4-GPU Megatron-LM training run (tensor parallel), not one GPU",
    "pp4_1": "a 4-GPU Megatron-LM training run (pipeline parallel), not one GPU",
}
"""Label suffixes that are not a run of the harvested model on one GPU, and why."""
UNHARVESTED = {
    "switch4": "no config in data/DLmodel_configs/ (NeuSight ships none for switch4)",
    "switchxl4": (
        "not harvested: NeuSight replaced the Switch sparse MLP's forward with its own "
        "(trace.py set_moe: a loop over experts, count_nonzero, padding to expert_capacity), "
        "which routes by data and cannot run on the meta device; a CPU run needs its 5.3 B "
        "fp32 weights (21 GB); and this copy has no per-node trace of it"
    ),
}
"""Models of the labels that have no shipped spec, and why."""

Mode = Literal["inference", "training"]


@dataclass(frozen=True)
class Label:
    """One whole-model label file of the data set."""

    file: str
    """The JSON's path relative to the data set's root (``label/Tesla_P4/bert_large-...``)."""
    folder: str
    """The label folder: the device string with spaces replaced by ``_``."""
    model: str
    """NeuSight's model name (``bert_large``): its config file's stem."""
    mode: Mode
    seqlen: int
    batch: int
    suffix: str | None

    @property
    def device(self) -> str:
        """The GPU's device string (``Tesla P4``), the device kind's name."""
        return self.folder.replace("_", " ")

    @property
    def trace(self) -> str:
        """The per-node trace's path (it may not exist)."""
        return re.sub(r"\.json(\.gz)?$", r".csv\1", self.file)

    @property
    def spec_name(self) -> str:
        """The harvested spec's model name (``neusight-bert-large-inf-512-8``)."""
        return spec_name(self.model, self.mode, self.seqlen, self.batch)

    @property
    def skip_reason(self) -> str | None:
        """Why the label is not imported as a run of a harvested model; None where it is."""
        if self.suffix is not None:
            return SKIPPED_SUFFIXES.get(self.suffix, f"an unknown variant (-{self.suffix})")
        return UNHARVESTED.get(self.model)


def spec_name(model: str, mode: Mode, seqlen: int, batch: int) -> str:
    """Return the spec's model name of a run (a model name has no ``_``: ``-`` instead)."""
    short = "inf" if mode == "inference" else "train"
    return f"{SPEC_PREFIX}-{model.replace('_', '-')}-{short}-{seqlen}-{batch}"


def parse_label(file: str) -> Label | None:
    """Return the label a path names (relative to the data set's root); None if it is none."""
    path = Path(file)
    found = _LABEL.match(path.name)
    if found is None or len(path.parts) < 2:
        return None
    return Label(
        file=path.as_posix(),
        folder=path.parent.name,
        model=found["model"],
        mode="inference" if found["mode"] == "inf" else "training",
        seqlen=int(found["seqlen"]),
        batch=int(found["batch"]),
        suffix=found["suffix"],
    )


def label_files(root: Path) -> list[str]:
    """Return every label JSON under ``root/label/``, relative to ``root``, sorted."""
    base = root / LABEL_DIR
    if not base.is_dir():
        return []
    return sorted(
        p.relative_to(root).as_posix()
        for p in base.glob("*/*.json*")
        if p.name.endswith((".json", ".json.gz"))
    )


def model_class(config: dict[str, Any], mode: Mode) -> str:
    """Return the transformers class NeuSight built from a model config for ``mode``.

    Raises:
        ValueError: a family NeuSight's ``get_model`` does not build.
    """
    family = str((config.get("architectures") or [""])[0]).lower()
    if "bert" in family:
        return "BertForSequenceClassification" if mode == "inference" else "BertForPreTraining"
    if "gpt" in family:
        return "GPT2LMHeadModel"
    if "opt" in family:
        return "OPTForCausalLM"
    raise ValueError(f"NeuSight builds no model of family {family!r} here")


def layer_key(config: dict[str, Any]) -> str:
    """Return the config field NeuSight sets to 1 for the one-layer trace."""
    family = str((config.get("architectures") or [""])[0]).lower()
    return "n_layer" if "gpt" in family else "num_hidden_layers"
