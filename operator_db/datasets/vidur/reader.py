"""Vidur's LLM operator profiles on disk (``../shared/data/vidur``, or a copy): files and rows.

Layout and columns: the data set's README (``compute/<gpu>/<org>/<model>/mlp.csv.gz``, gzip each;
one row per (``num_tokens``, ``num_tensor_parallel_workers``) of a model, and per operator its
``time_stats.<op>.{min,max,mean,median,std}`` in milliseconds). Each (row, operator) is one
result: the operator's configuration (``vidur.ops``) on the row's GPU, its time the median of
Vidur's repeated timings; the other statistics are kept in the result's provenance.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from operator_db.datasets.records import BadRow, Built, KindInfo, OpRow, SourceInfo
from operator_db.datasets.vidur.ops import FUSED, TRAITS, Block, Traits, config
from operator_db.errors import InvalidInputError
from operator_db.roofline.chips import chip_spec
from operator_db.specs.io import format_error, format_loc
from operator_db.specs.keys import operator_key

NAME = "vidur"
COMPUTE_DIR = "compute"
URL = "https://github.com/microsoft/vidur"
METHOD = (
    "Each operator of one transformer block timed with CUDA events (Vidur's CudaTimer) over "
    "repeated forwards of the block, reused inputs, fp16; the figure is the median of the "
    "repetitions (min, max, mean and std are in each result's provenance). Times in ms in the "
    "data set."
)
CITATION = (
    'A. Agrawal et al., "Vidur: A Large-Scale Simulation Framework for LLM Inference", MLSys 2024'
)
GPUS = {
    "a100": ("NVIDIA A100-SXM4-80GB", "Ampere"),
    "a40": ("NVIDIA A40", "Ampere"),
    "h100": ("NVIDIA H100 80GB HBM3", "Hopper"),
}
"""Vidur's GPU folders → the NVML name of the GPU (its device kind) and its architecture."""
SHAPE = {
    "n_head": "heads",
    "n_kv_head": "kv_heads",
    "n_embd": "hidden",
    "n_expanded_embd": "ffn",
    "vocab_size": "vocab",
    "num_tokens": "tokens",
    "num_tensor_parallel_workers": "tp",
}
"""The shape columns → ``ops.Block``'s fields."""
_OP = re.compile(r"^time_stats\.(\w+)\.median$")
_COMMIT = re.compile(r"commit ([0-9a-f]{40})")
_STATS = ("min", "max", "mean", "std")


def find_root(path: Path) -> tuple[Path, str | None]:
    """Return the data set's folder holding ``path``, and ``path`` relative to it.

    Raises:
        InvalidInputError: no folder holding ``compute/`` at or above ``path``.
    """
    path = path.resolve()
    if not path.exists():
        raise InvalidInputError(f"{path}: no such file or folder")
    for folder in (path, *path.parents):
        if is_vidur(folder):
            return folder, None if folder == path else path.relative_to(folder).as_posix()
    raise InvalidInputError(f"{path} is not in a Vidur data set: no {COMPUTE_DIR}/ above it")


def in_vidur(path: Path) -> bool:
    """Return whether ``path`` is a Vidur data set or a folder or file inside one."""
    path = path.resolve()
    return path.exists() and any(is_vidur(f) for f in (path, *path.parents))


def is_vidur(folder: Path) -> bool:
    """Return whether ``folder`` is a Vidur data set: ``compute/<gpu>/.../mlp.csv*`` in it."""
    compute = folder / COMPUTE_DIR
    return compute.is_dir() and next(compute.glob("*/*/*/mlp.csv*"), None) is not None


class Vidur:
    """Vidur's profiles in ``root``: a ``datasets.records.DataSet``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        readme = root / "README.md"
        text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
        found = _COMMIT.search(text)
        self.source = SourceInfo(
            name=NAME,
            title="Vidur LLM operator profiles (MLSys 2024)",
            url=URL,
            version=found.group(1) if found else None,
            license="MIT",
            citation=CITATION,
            method=METHOD,
            info={"dtype": "float16", "unit": "ms", "profiler": "Vidur CudaTimer"},
        )
        self._configs: dict[tuple[Any, ...], Built] = {}
        self.left_out: Counter[str] = Counter()
        """Results not imported by design, by why (a fused kernel), counted as they are read."""

    def kinds(self) -> list[KindInfo]:
        """Return the GPUs of ``compute/`` that this reader knows (``GPUS``)."""
        out = []
        for folder in sorted(p.name for p in (self.root / COMPUTE_DIR).iterdir() if p.is_dir()):
            if folder in GPUS:
                name, architecture = GPUS[folder]
                chip = chip_spec(name)
                memory = int(chip.memory_bytes) if chip and chip.memory_bytes else None
                out.append(KindInfo(name, "NVIDIA", architecture, memory, {"folder": folder}))
        return out

    def files(self) -> list[str]:
        """Return every model's ``mlp.csv`` (gzip or not), by GPU, then organisation and model."""
        base = self.root / COMPUTE_DIR
        return sorted(p.relative_to(self.root).as_posix() for p in base.glob("*/*/*/mlp.csv*"))

    def read(self, file: str) -> Iterator[OpRow | BadRow]:
        """Yield the file's rows, one per (row, operator), checked."""
        parts = Path(file).parts
        gpu, model = parts[1], "/".join(parts[2:4])
        if gpu not in GPUS:
            yield BadRow(file, 1, f"unknown GPU folder {gpu[:40]!r} (known: {', '.join(GPUS)})")
            return
        try:
            frame = pd.read_csv(self.root / file)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            yield BadRow(file, 1, f"cannot read the file: {exc}")
            return
        missing = [c for c in (*SHAPE, "use_gated_mlp") if c not in frame.columns]
        if missing:
            yield BadRow(file, 1, f"no {missing[0]!r} column")
            return
        yield from self._rows(file, frame, GPUS[gpu][0], model)

    def _rows(
        self, file: str, frame: pd.DataFrame, device: str, model: str
    ) -> Iterator[OpRow | BadRow]:
        traits = TRAITS.get(model.split("/")[-1], Traits())
        shapes = {
            field: pd.to_numeric(frame[c], errors="coerce").to_numpy(float)
            for c, field in SHAPE.items()
        }
        ok = np.logical_and.reduce(
            [np.isfinite(v) & (v >= 1) & (v == np.floor(v)) for v in shapes.values()]
        )
        gated = frame["use_gated_mlp"].astype(str).str.lower().isin(["true", "1"]).to_numpy()
        ops = [m.group(1) for c in frame.columns if (m := _OP.match(c))]
        for index in range(len(frame)):
            line = index + 2
            if not ok[index]:
                yield BadRow(file, line, "a shape column is not a positive integer")
                continue
            block = Block(
                **{k: int(v[index]) for k, v in shapes.items()},
                gated=bool(gated[index]),
                traits=traits,
            )
            for op in ops:
                if op in FUSED and (op != "mlp_act" or block.gated):
                    self.left_out[f"{op}: {FUSED[op]}"] += 1
                    continue
                ms = frame[f"time_stats.{op}.median"].iat[index]
                if not isinstance(ms, int | float) or not np.isfinite(ms) or ms <= 0:
                    yield BadRow(file, line, f"{op}: median {str(ms)[:40]!r} is not a positive ms")
                    continue
                yield OpRow(
                    what=(model, op, block.tokens, block.tp),
                    build=partial(self._config, op, block),
                    mode="inference",
                    device=device,
                    time_s=float(ms) / 1000,
                    line=line,
                    details=partial(_details, frame, op, index, model),
                )

    def _config(self, op: str, block: Block) -> Built:
        cache_key = (op, block)
        found = self._configs.get(cache_key)
        if found is None:
            try:
                built = config(op, block)
                found = (
                    built if isinstance(built, str) else (built, operator_key(built, "inference"))
                )
            except ValueError as exc:  # pydantic's ValidationError is one
                if isinstance(exc, ValidationError):
                    error = exc.errors()[0]
                    where = format_loc(error["loc"])
                    found = f"{op}: {where + ': ' if where else ''}{format_error(error)}"
                else:
                    found = f"{op}: {exc}"
            self._configs[cache_key] = found
        return found


def _details(frame: pd.DataFrame, op: str, index: int, model: str) -> dict[str, Any]:
    """Return what row ``index`` says beside the median: the model, the other statistics (ms)."""
    stats = {}
    for s in _STATS:
        column = f"time_stats.{op}.{s}"
        if column in frame.columns:
            value = frame[column].iat[index]
            stats[s] = float(value) if np.isfinite(value) else None
    return {
        "model": model,
        "op": op,
        "num_tokens": int(frame["num_tokens"].iat[index]),
        "tensor_parallel": int(frame["num_tensor_parallel_workers"].iat[index]),
        "ms": stats,
    }


def vidur(path: Path) -> tuple[Vidur, list[str]]:
    """Return the data set holding ``path`` and its files to import (those in ``path``).

    Raises:
        InvalidInputError: ``path`` is in no Vidur data set, or holds none of its files.
    """
    root, inside = find_root(path)
    data = Vidur(root)
    files = data.files()
    if inside is None:
        return data, files
    prefix = inside.rstrip("/") + "/"
    chosen = [f for f in files if f == inside or f.startswith(prefix)]
    if not chosen:
        raise InvalidInputError(f"{path}: no per-operator file of the Vidur data set")
    return data, chosen
