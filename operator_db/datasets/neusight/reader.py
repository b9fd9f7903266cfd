"""The NeuSight data set on disk (``../shared/data/neusight``, or a copy): its files and rows.

Layout and columns: the data set's README (``data/dataset/``: per-operator CSVs, gzip-compressed
each; ``data/device_configs/``: one JSON per GPU). Every per-operator CSV is read: the per-GPU
collection files first, then the merged and filtered training files and the test files, whose
rows repeat others (counted as duplicates: a row's identity is its device, configuration and
latency, ``OpRow.identity``).
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from operator_db.datasets.neusight.labels import label_files
from operator_db.datasets.neusight.ops import FAMILIES, Family
from operator_db.datasets.records import BadRow, Built, KindInfo, OpRow, SourceInfo
from operator_db.errors import InvalidInputError
from operator_db.roofline.chips import chip_spec
from operator_db.specs.io import format_error, format_loc
from operator_db.specs.keys import operator_key
from operator_db.specs.schema import OperatorSpec

NAME = "neusight"
DATASET_DIR = "data/dataset"
CONFIG_DIR = "data/device_configs"
URL = "https://github.com/sitar-lab/NeuSight"
METHOD = (
    "Each latency is the mean of the 5 fastest of 25 timings of one call, each timed with CUDA "
    "events and followed by a synchronize: launch overhead included (the smallest ops read about "
    "20 to 50 µs). PyTorch 2.1.0, CUDA 12.1, cuDNN 8.9.2, fp32 with TF32 off."
)
CITATION = (
    'S. Lee, A. Phanishayee, D. Mahajan, "Forecasting GPU Performance for Deep Learning '
    'Training and Inference", ASPLOS 2025'
)
ARCHITECTURES = {
    "Tesla P4": "Pascal",
    "Tesla P100-PCIE-16GB": "Pascal",
    "Tesla V100-PCIE-32GB": "Volta",
    "Tesla T4": "Turing",
    "NVIDIA A100-PCIE-40GB": "Ampere",
    "NVIDIA A100 80GB PCIe": "Ampere",
    "NVIDIA A100-SXM4-40GB": "Ampere",
    "NVIDIA L4": "Ada Lovelace",
}
CORRECTIONS = {
    "NVIDIA L4": {
        "Num_Sm": (58, "NVIDIA L4 product brief: 7,424 CUDA cores, 58 SMs of AD104's 60"),
        "SingleFLOPs": (30290, "NVIDIA L4 datasheet: 30.3 TFLOP/s FP32 (2 × 7,424 × 2.04 GHz)"),
    },
    "Tesla P4": {
        "Num_Sm": (20, "NVIDIA Tesla P4 datasheet: 2,560 CUDA cores on GP104's 20 SMs"),
        "Core_Per_SM": (128, "NVIDIA GP104 (GeForce GTX 1080 whitepaper): 128 FP32 cores per SM"),
        "Freq": (1063, "NVIDIA Tesla P4 launch: 1,063 MHz boost clock"),
        "SingleFLOPs": (5500, "NVIDIA Tesla P4 datasheet: 5.5 TFLOP/s FP32"),
    },
    "Tesla P100-PCIE-16GB": {
        "Freq": (1303, "NVIDIA Tesla P100 PCIe product brief: 1,303 MHz boost clock"),
        "SingleFLOPs": (9300, "NVIDIA Tesla P100 datasheet: 9.3 TFLOP/s FP32 (PCIe)"),
    },
    "Tesla T4": {
        "Dev_Mem": (16, "NVIDIA T4 datasheet: 16 GB GDDR6 (15 GiB is what ECC leaves visible)"),
    },
}
"""The data set's own device configs' errors, as its README lists them, and their sources."""
_COMMIT = re.compile(r"commit ([0-9a-f]{40})")
_DETAILS = {
    "Kernel Name": "kernel",
    "Warps per SM": "warps_per_sm",
    "Blocks per SM": "blocks_per_sm",
}


def find_root(path: Path) -> tuple[Path, str | None]:
    """Return the data set's folder holding ``path``, and ``path`` relative to it.

    ``path`` is the data set's folder (the relative part is then None), or a folder or file
    inside it.

    Raises:
        InvalidInputError: no folder holding ``data/dataset`` at or above ``path``.
    """
    path = path.resolve()
    if not path.exists():
        raise InvalidInputError(f"{path}: no such file or folder")
    for folder in (path, *path.parents):
        if (folder / DATASET_DIR).is_dir():
            return folder, None if folder == path else path.relative_to(folder).as_posix()
    raise InvalidInputError(
        f"{path} is not in a NeuSight data set: no {DATASET_DIR}/ in it or a folder above it"
    )


def _read_json(path: Path) -> Any:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


class NeuSight:
    """The NeuSight data set in ``root``: a ``datasets.records.DataSet``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        if not (root / DATASET_DIR).is_dir():
            raise InvalidInputError(f"{root} is not a NeuSight data set: no {DATASET_DIR}/")
        readme = root / "README.md"
        text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
        found = _COMMIT.search(text)
        self.source = SourceInfo(
            name=NAME,
            title="NeuSight GPU performance data (ASPLOS 2025)",
            url=URL,
            version=found.group(1) if found else None,
            license="MIT",
            citation=CITATION,
            method=METHOD,
            info={"torch": "2.1.0", "cuda": "12.1", "cudnn": "8.9.2", "dtype": "float32"},
        )
        self._configs: dict[tuple[Any, ...], tuple[OperatorSpec, str] | str] = {}

    def kinds(self) -> list[KindInfo]:
        """Return the GPUs of ``data/device_configs/``, their configs corrected where wrong."""
        out = []
        for path in sorted((self.root / CONFIG_DIR).glob("*.json*")):
            config = _read_json(path)
            name = str(config["Device"])
            fixes = CORRECTIONS.get(name, {})
            corrected = {**config, **{k: v for k, (v, _) in fixes.items()}}
            info = {
                "config": config,
                "corrected": corrected,
                "corrections": {k: why for k, (_, why) in fixes.items()},
            }
            chip = chip_spec(name)
            memory = chip.memory_bytes if chip is not None else None
            out.append(
                KindInfo(
                    name=name,
                    vendor="NVIDIA",
                    architecture=ARCHITECTURES.get(name),
                    memory_bytes=int(memory) if memory else int(corrected["Dev_Mem"]) * 2**30,
                    info=info,
                )
            )
        return out

    def files(self) -> list[str]:
        """Return every per-operator CSV, per-GPU collection files first."""
        base = self.root / DATASET_DIR
        every = sorted(
            p.relative_to(self.root).as_posix()
            for p in base.rglob("*.csv*")
            if "dims" not in p.relative_to(base).parts
        )
        per_gpu = [f for f in every if "/p2.1.0/" in f]
        return per_gpu + [f for f in every if f not in per_gpu]

    def read(self, file: str) -> Iterator[OpRow | BadRow]:
        """Yield the file's rows, checked (a bad row says its line and why)."""
        path = self.root / file
        try:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            yield BadRow(file, 1, f"cannot read the file: {exc}")
            return
        yield from self._rows(file, frame)

    def _rows(self, file: str, frame: pd.DataFrame) -> Iterator[OpRow | BadRow]:
        columns = set(frame.columns)
        for needed in ("OPName", "Latency", "Device"):
            if needed not in columns:
                for index in range(len(frame)):
                    yield BadRow(file, index + 2, f"no {needed!r} column")
                return
        latency = pd.to_numeric(frame["Latency"], errors="coerce").to_numpy()
        # Each shape column once, vectorized: its integers and where they are positive integers.
        shapes: dict[str, tuple[list[int], list[bool]]] = {}
        for c in {c for f in FAMILIES.values() for c in f.columns} & columns:
            values = pd.to_numeric(frame[c], errors="coerce").to_numpy(dtype=float)
            valid = np.isfinite(values) & (values >= 1) & (values == np.floor(values))
            shapes[c] = (np.where(valid, values, 0).astype(np.int64).tolist(), valid.tolist())
        times = latency.tolist()
        names = frame["OPName"].tolist()
        devices = frame["Device"].tolist()
        extra = {c: frame[c].to_numpy() for c in (*_DETAILS, "Kernels") if c in columns}
        grid = [
            frame[c].to_numpy() if c in columns else None for c in ("Grid x", "Grid y", "Grid z")
        ]
        block = [
            frame[c].to_numpy() if c in columns else None for c in ("Block x", "Block y", "Block z")
        ]
        for index, (name, ms, device) in enumerate(zip(names, times, devices, strict=True)):
            line = index + 2
            family = FAMILIES.get(name)
            if family is None:
                yield BadRow(file, line, f"unknown operator {str(name)[:40]!r}")
                continue
            if not math.isfinite(ms) or ms <= 0:
                raw = str(frame["Latency"].iat[index])[:40]
                yield BadRow(file, line, f"latency {raw!r} is not a positive number of ms")
                continue
            shape = _shape(family, shapes, index)
            if isinstance(shape, str):
                yield BadRow(file, line, shape)
                continue
            yield OpRow(
                what=(family.name, *shape),
                build=partial(self._config, family, shape),
                mode="inference",
                device=device,
                time_s=ms / 1000,
                line=line,
                details=partial(_details, extra, grid, block, index),
            )

    def _config(self, family: Family, shape: tuple[int, ...]) -> Built:
        cache_key = (family.name, *shape)
        found = self._configs.get(cache_key)
        if found is None:
            try:
                config = family.build(dict(zip(family.columns, shape, strict=True)))
                found = (config, operator_key(config, "inference"))
            except ValidationError as exc:
                error = exc.errors()[0]
                where = format_loc(error["loc"])
                found = (
                    f"{family.name} {shape}: {where + ': ' if where else ''}{format_error(error)}"
                )
            self._configs[cache_key] = found
        return found


def _shape(
    family: Family, shapes: dict[str, tuple[list[int], list[bool]]], index: int
) -> tuple[int, ...] | str:
    """Return row ``index``'s shape for ``family``, or why it has none."""
    values = []
    for column in family.columns:
        if column not in shapes:
            return f"{family.name}: no {column!r} column"
        ints, valid = shapes[column]
        if not valid[index]:
            return f"{family.name}: {column} must be a positive integer"
        values.append(ints[index])
    return tuple(values)


def _details(
    extra: dict[str, Any], grid: list[Any], block: list[Any], index: int
) -> dict[str, Any]:
    """Return what row ``index`` says of its kernels: name, occupancy, grid and block."""
    details: dict[str, Any] = {
        k: _plain(extra[c][index]) for c, k in _DETAILS.items() if c in extra
    }
    if "Kernels" in extra:
        kernels = [k for k in str(extra["Kernels"][index]).split(";") if k]
        if kernels and kernels != [str(details.get("kernel", "")).lower()]:
            details["kernels"] = kernels
    if grid[0] is not None:
        details["grid"] = [_plain(g[index]) for g in grid if g is not None]
    if block[0] is not None:
        details["block"] = [_plain(b[index]) for b in block if b is not None]
    return details


def _plain(value: Any) -> Any:
    """Return a CSV cell as a JSON value: a number where it reads as one, else its text."""
    text = str(value)
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() else number


def neusight(path: Path) -> tuple[NeuSight, list[str], list[str]]:
    """Return the data set holding ``path``, its per-operator files to import, its labels.

    All of its per-operator files and whole-model labels (``labels.label_files``), or those in
    (or of) ``path`` where it is a folder or file inside the data set.

    Raises:
        InvalidInputError: ``path`` is in no NeuSight data set, or holds none of its files.
    """
    root, inside = find_root(path)
    data = NeuSight(root)
    files, labels = data.files(), label_files(root)
    if inside is None:
        return data, files, labels
    prefix = inside.rstrip("/") + "/"
    chosen = [f for f in files if f == inside or f.startswith(prefix)]
    runs = [f for f in labels if f == inside or f.startswith(prefix)]
    if not chosen and not runs:
        raise InvalidInputError(
            f"{path}: neither a per-operator file nor a whole-model label of the NeuSight data set"
        )
    return data, chosen, runs
