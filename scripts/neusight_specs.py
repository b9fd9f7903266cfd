"""Harvest the models of NeuSight's whole-model labels into the specs the NeuSight import ships.

One spec per distinct (model, mode, sequence length, batch) of the labels without a suffix, each
model built as NeuSight built it (``operator_db.datasets.neusight.labels``): the transformers class
of its family from ``data/DLmodel_configs/<model>.json``, eager attention, fp32, ``input_ids`` of
ones, harvested on the meta device in the label's mode. Labels with a suffix (``-fusion``,
``-dp4``, ...) and models without a spec (``labels.UNHARVESTED``) are listed and left out.

The specs go to ``operator_db/datasets/neusight/specs/`` (package data: the import reads them,
the wheel ships them; not in ``measurement_specs/``, whose every spec ``opdb demo`` ingests).

Run: .venv/bin/python scripts/neusight_specs.py [DATA] [-o operator_db/datasets/neusight/specs]
(DATA: the NeuSight data set's folder, default ../shared/data/neusight).
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

from operator_db.datasets.neusight.labels import (
    MODEL_CONFIG_DIR,
    Label,
    label_files,
    model_class,
    parse_label,
)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "neusight"
DEFAULT_OUT = ROOT / "operator_db" / "datasets" / "neusight" / "specs"
DROPPED_ALWAYS = ("architectures",)
"""Config keys not passed: NeuSight picks the class by the config's family, not this entry."""


def _read_json(path: Path) -> Any:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def config_file(data: Path, model: str) -> Path | None:
    """Return the model's config file in the data set, or None."""
    for name in (f"{model}.json.gz", f"{model}.json"):
        if (data / MODEL_CONFIG_DIR / name).is_file():
            return data / MODEL_CONFIG_DIR / name
    return None


def overrides_of(config: dict[str, Any], cls: str) -> tuple[dict[str, Any], list[str]]:
    """Return the config's fields the transformers config class takes, and the keys left out.

    A key the class does not know (``n_ctx`` and ``task_specific_params`` of GPT-2 in
    transformers 5, ``padded_vocab_size``) did nothing in NeuSight's run either: transformers
    keeps an unknown key as an attribute no model code reads.
    """
    import transformers

    default = getattr(transformers, cls).config_class()
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in config.items():
        if key in DROPPED_ALWAYS or key.startswith("_") or not hasattr(default, key):
            dropped.append(key)
        else:
            kept[key] = value
    kept["attn_implementation"] = "eager"
    return kept, dropped


def runs(data: Path) -> tuple[dict[tuple[str, str, int, int], list[Label]], list[str]]:
    """Return the labels to harvest grouped by run, and a line per label left out."""
    groups: dict[tuple[str, str, int, int], list[Label]] = defaultdict(list)
    left: list[str] = []
    for file in label_files(data):
        label = parse_label(file)
        if label is None:
            left.append(f"{file}: not a label name")
            continue
        reason = label.skip_reason
        if reason is not None:
            left.append(f"{file}: {reason}")
            continue
        groups[(label.model, label.mode, label.seqlen, label.batch)].append(label)
    return dict(sorted(groups.items())), left


def harvest_one(
    data: Path, out: Path, run: tuple[str, str, int, int], labels: list[Label]
) -> tuple[Path, float, int, int]:
    """Harvest one run's model and write its spec; return the path, seconds, configs, calls."""
    from operator_db.harvest import harvest, load_reference, parse_reference
    from operator_db.specs.io import parse_spec, write_spec
    from operator_db.specs.schema import TensorSpec

    model, mode, seqlen, batch = run
    path = config_file(data, model)
    if path is None:
        raise SystemExit(f"{model}: no config in {data / MODEL_CONFIG_DIR}")
    config = _read_json(path)
    cls = model_class(config, mode)  # type: ignore[arg-type]
    overrides, dropped = overrides_of(config, cls)
    ref = parse_reference(f"transformers:{cls}", overrides)
    started = time.perf_counter()
    module = load_reference(ref)
    name = labels[0].spec_name
    step = "no_grad forward" if mode == "inference" else "forward and backward"
    tag = "inf" if mode == "inference" else "train"
    description = (
        f"NeuSight (ASPLOS 2025) whole-model label {model}-{tag}-{seqlen}-{batch}: {cls} "
        f"from its {path.name.removesuffix('.gz')} (as neusight/Tracing/trace.py builds it), "
        f"fp32, eager attention, input_ids of ones ({batch}, {seqlen}), {step}."
    )
    result = harvest(
        module,
        [TensorSpec(name="input_ids", shape=[batch, seqlen], dtype="int64", value_range=(1, 2))],
        reference=ref,
        mode=mode,  # type: ignore[arg-type]
        device="meta",
        name=name,
        description=description,
    )
    seconds = time.perf_counter() - started
    spec = result.spec
    provenance = {
        **spec.provenance,
        "neusight": {
            "config": path.relative_to(data).as_posix(),
            "class": cls,
            "config_keys_left_out": dropped,
            "labels": sorted(label.file for label in labels),
        },
    }
    spec = parse_spec(
        spec.model_copy(update={"provenance": provenance}).model_dump(mode="json"), name
    ).spec
    target = out / f"{name}.yaml"
    write_spec(spec, target)
    return target, seconds, len(spec.operators), sum(op.count for op in spec.operators)


def main() -> None:
    """Harvest every run's model; print what was written, left out, and how long it took."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    started = time.perf_counter()
    groups, left = runs(args.data)
    args.out.mkdir(parents=True, exist_ok=True)
    for run, labels in groups.items():
        path, seconds, configs, calls = harvest_one(args.data, args.out, run, labels)
        print(
            f"{path.name}: {configs} configurations, {calls} calls, {seconds:.1f} s, "
            f"{len(labels)} labels"
        )
    for line in left:
        print(f"left out: {line}")
    print(f"{len(groups)} specs in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
