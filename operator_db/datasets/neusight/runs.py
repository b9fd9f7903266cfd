"""NeuSight's whole-model labels as measured runs of harvested models, their traces as results.

For each label (``labels.py``) whose model has a shipped spec (``specs/`` beside this module,
written by ``scripts/neusight_specs.py``), inside the caller's transaction:

1. the spec is ingested through the one ingest path (``db.ingest.ingest_specs``: a spec already
   stored is unchanged);
2. the label's JSON becomes one ``full_model_runs`` row of the spec's model on the GPU's device
   kind: time per call = ``e2e_latency`` (inference: the forward under ``no_grad``; training:
   forward + ``loss.backward()``), eager, warm, no energy;
3. each node of its trace that is one of the spec's configurations (``trace.match_nodes``)
   becomes a ``measurements`` row of that configuration on the kind: the node's ``fw_latency``
   for an inference spec, its ``latency`` (forward + backward + gradient accumulation) for a
   training spec, whose configurations cost a forward and a backward.

Every row is tagged with the data set (``source_id``) and its identity there (``source_ref``): a
second import adds nothing. Labels left out (``-fusion``, 4-GPU runs, models without a spec) are
counted as skipped and said, with the reason; unreadable files are bad rows.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy.orm import Session

from operator_db.config import get_settings
from operator_db.datasets.importer import ImportRefusedError, Progress, ensure_kind
from operator_db.datasets.neusight.labels import Label, label_files, parse_label
from operator_db.datasets.neusight.reader import NeuSight
from operator_db.datasets.neusight.trace import TraceMatch, TraceNode, match_nodes, read_trace
from operator_db.datasets.records import BadRow, FileCounts, OnBad
from operator_db.datasets.runs import identity, measurement_row, run_row
from operator_db.db import queries
from operator_db.db.ingest import IngestResult, config_ids, ingest_specs
from operator_db.errors import SpecError
from operator_db.roofline.record import store_attained_roofs
from operator_db.specs.io import LoadedSpec, load_spec

SPEC_FOLDER = "specs"
UNMAPPED_SHOWN = 12
"""Unmapped node forms kept per run (costliest first) in the report and the run's provenance."""


def shipped_specs_dir() -> Path:
    """Return the folder of the shipped NeuSight specs (package data, in the wheel too)."""
    return Path(__file__).resolve().parent / SPEC_FOLDER


@dataclass
class TraceSummary:
    """What a run's trace mapped, the first layer's nodes counted ``num_layer`` times each.

    Repeating the first layer is the data set README's way to compare a one-layer trace with
    the whole model.
    """

    file: str
    nodes: int = 0
    mapped: int = 0
    equivalent: int = 0
    """Mapped nodes whose call is an equivalent of the configuration (``trace.EQUIVALENTS``)."""
    unmapped: int = 0
    python: int = 0
    """Nodes whose result is no tensor (sizes, attributes): no kernel, a timer's floor each."""
    mapped_ms: float = 0.0
    total_ms: float = 0.0
    python_ms: float = 0.0
    unmapped_forms: dict[str, list[float]] = field(default_factory=dict)
    """Unmapped ``op target`` → [nodes, ms with the layer repeated], costliest first."""

    @property
    def coverage(self) -> float | None:
        """Σ time of the mapped nodes / Σ time of all nodes (layer repeated); None if no time."""
        return self.mapped_ms / self.total_ms if self.total_ms > 0 else None

    def as_dict(self) -> dict[str, Any]:
        """Return the summary as JSON-ready data (a run's provenance keeps it)."""
        return {
            "file": self.file,
            "nodes": self.nodes,
            "mapped": self.mapped,
            "equivalent": self.equivalent,
            "unmapped": self.unmapped,
            "python": self.python,
            "mapped_ms": self.mapped_ms,
            "total_ms": self.total_ms,
            "python_ms": self.python_ms,
            "coverage": self.coverage,
            "unmapped_forms": self.unmapped_forms,
        }


@dataclass
class RunInfo:
    """One label imported as a run (or found already stored)."""

    label: str
    device: str
    model: str
    """The spec's model name."""
    mode: str
    seqlen: int
    batch: int
    num_layer: int
    measured_s: float
    trace: TraceSummary | None = None


@dataclass
class RunsReport:
    """What importing the labels did: per file its counts, the runs, what was left out and why."""

    source: str
    files: list[FileCounts] = field(default_factory=list)
    bad: list[BadRow] = field(default_factory=list)
    left_out: list[BadRow] = field(default_factory=list)
    """Labels not imported by design (a variant, a model without a spec), with the reason."""
    specs: list[IngestResult] = field(default_factory=list)
    runs: list[RunInfo] = field(default_factory=list)

    def total(self, kind: str | None = None) -> FileCounts:
        """Return the counts summed over the files: all, or ``label`` files or ``trace`` ones."""
        out = FileCounts("total")
        for counts in self.files:
            is_trace = ".csv" in Path(counts.file).name
            if kind is not None and is_trace != (kind == "trace"):
                continue
            out.read += counts.read
            out.imported += counts.imported
            out.duplicate += counts.duplicate
            out.skipped += counts.skipped
        return out


def _read_json(path: Path) -> Any:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def _latencies(data: Any) -> dict[str, float] | str:
    """Return a label JSON's latencies (ms) and layers, or why they are unusable."""
    if not isinstance(data, dict):
        return "not a JSON object"
    out: dict[str, float] = {}
    for name in ("e2e_latency", "fw_latency", "bwall_latency"):
        value = data.get(name, 0.0 if name == "bwall_latency" else None)
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            return f"{name} {str(value)[:40]!r} is not a number of ms"
        out[name] = float(value)
    if out["e2e_latency"] <= 0:
        return "e2e_latency is not positive"
    layers = data.get("num_layer")
    out["num_layer"] = float(layers) if isinstance(layers, int) and layers > 0 else 0.0
    return out


def import_runs(
    session: Session,
    data: NeuSight,
    *,
    files: Sequence[str] | None = None,
    specs_dir: Path | None = None,
    on_bad: OnBad = "skip",
    progress: Progress | None = None,
) -> RunsReport:
    """Import the data set's whole-model labels (``files``: some label JSONs; default all).

    Flushes, never commits.

    Raises:
        ImportRefusedError: ``on_bad="refuse"`` and a file or node is bad (raised before the
            caller commits: its transaction rolls back, nothing is stored).
        SpecError: a shipped spec is not valid.
    """
    folder = specs_dir if specs_dir is not None else shipped_specs_dir()
    source = queries.get_or_update_data_source(session, data.source.name, data.source.columns())
    report = RunsReport(data.source.name)
    kinds = {info.name: ensure_kind(session, info, data.source.name) for info in data.kinds()}
    chosen: list[tuple[Label, FileCounts]] = []
    for file in files if files is not None else label_files(data.root):
        counts = FileCounts(file, read=1)
        report.files.append(counts)
        label = parse_label(file)
        reason = "not a label name" if label is None else label.skip_reason
        if label is not None and reason is None and label.device not in kinds:
            counts.skipped = 1
            report.bad.append(BadRow(file, 1, f"unknown device {label.device!r}"))
        elif label is None or reason is not None:
            counts.skipped = 1
            report.left_out.append(BadRow(file, 1, str(reason)))
        else:
            chosen.append((label, counts))
    specs = _load_specs(folder, {label.spec_name for label, _ in chosen})
    for label, counts in chosen:
        if label.spec_name not in specs:
            counts.skipped = 1
            why = f"no spec {label.spec_name}.yaml in {folder}"
            report.left_out.append(BadRow(label.file, 1, why))
    chosen = [(label, counts) for label, counts in chosen if label.spec_name in specs]
    report.specs = ingest_specs(
        session, [specs[n] for n in sorted({x.spec_name for x, _ in chosen})]
    )
    stored_runs = queries.imported_refs(session, source.id, table="full_model_runs")
    stored = queries.imported_refs(session, source.id)
    for label, counts in chosen:
        _import_label(
            session,
            data,
            label,
            counts,
            specs[label.spec_name],
            report,
            _Ids(source.id, kinds[label.device].id, stored_runs, stored),
        )
        if progress is not None:
            progress(label.file, counts.read)
    for kind in kinds.values():  # the kinds' L2 roofs, attained by what is now stored
        store_attained_roofs(session, kind)
    if on_bad == "refuse" and report.bad:
        shown = "; ".join(str(b) for b in report.bad[:20])
        raise ImportRefusedError(f"{len(report.bad)} bad files or rows, import refused: {shown}")
    return report


@dataclass(frozen=True)
class _Ids:
    source: int
    kind: int
    runs: set[str]
    """Identities of the runs already stored (grows as runs are added)."""
    results: set[str]
    """Identities of the per-node results already stored (grows likewise)."""


def _load_specs(folder: Path, names: set[str]) -> dict[str, LoadedSpec]:
    """Return the shipped specs of these model names that exist, by name."""
    limit = get_settings().max_spec_bytes
    found: dict[str, LoadedSpec] = {}
    for name in sorted(names):
        path = folder / f"{name}.yaml"
        if path.is_file():
            loaded = load_spec(path, max_bytes=limit)
            if loaded.spec.model.name != name:
                raise SpecError(str(path), "model.name", f"must be {name!r}")
            found[name] = loaded
    return found


def _import_label(
    session: Session,
    data: NeuSight,
    label: Label,
    counts: FileCounts,
    spec: LoadedSpec,
    report: RunsReport,
    ids: _Ids,
) -> None:
    try:
        latencies = _latencies(_read_json(data.root / label.file))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        latencies = f"cannot read the file: {exc}"
    if isinstance(latencies, str):
        counts.skipped = 1
        report.bad.append(BadRow(label.file, 1, latencies))
        return
    layers = int(latencies["num_layer"])
    info = RunInfo(
        label=label.file,
        device=label.device,
        model=label.spec_name,
        mode=label.mode,
        seqlen=label.seqlen,
        batch=label.batch,
        num_layer=layers,
        measured_s=latencies["e2e_latency"] / 1000,
    )
    report.runs.append(info)
    if (data.root / label.trace).is_file():
        info.trace = _import_trace(session, data, label, spec, layers, report, ids)
    ref = identity(label.device, label.spec_name, latencies["e2e_latency"])
    if ref in ids.runs:
        counts.duplicate = 1
        return
    ids.runs.add(ref)
    provenance: dict[str, Any] = {
        "source": data.source.name,
        "file": label.file,
        "num_layer": layers,
        "fw_ms": latencies["fw_latency"],
        "bwall_ms": latencies["bwall_latency"],
        "e2e_ms": latencies["e2e_latency"],
        "seqlen": label.seqlen,
    }
    if info.trace is not None:
        provenance["trace"] = info.trace.as_dict()
    model = queries.get_model(session, label.spec_name)
    row = run_row(
        model.id,
        info.measured_s,
        kind_id=ids.kind,
        source_id=ids.source,
        ref=ref,
        provenance=provenance,
        dtype=spec.spec.model.dtype,
    )
    counts.imported = queries.add_results(session, "full_model_runs", [row])


def _import_trace(
    session: Session,
    data: NeuSight,
    label: Label,
    spec: LoadedSpec,
    layers: int,
    report: RunsReport,
    ids: _Ids,
) -> TraceSummary | None:
    """Store the mapped nodes of a run's trace as results; return what the mapping did."""
    counts = FileCounts(label.trace)
    report.files.append(counts)
    try:
        frame = pd.read_csv(data.root / label.trace, dtype=str, keep_default_na=False)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        report.bad.append(BadRow(label.trace, 1, f"cannot read the file: {exc}"))
        counts.skipped = counts.read = 1
        return None
    nodes = read_trace(frame)
    if isinstance(nodes, str):
        report.bad.append(BadRow(label.trace, 1, nodes))
        counts.read = counts.skipped = len(frame)
        return None
    counts.read = len(nodes)
    mode = spec.spec.model.mode
    found = match_nodes(nodes, spec.spec.operators, spec.keys, mode)
    config = config_ids(session, sorted({m.key for m in found.matches}))
    rows = []
    for match in found.matches:
        node = match.node
        time_ms = node.fw_ms if mode == "inference" else node.latency_ms
        if not math.isfinite(time_ms) or time_ms <= 0:
            counts.skipped += 1
            report.bad.append(BadRow(label.trace, node.line, f"{node.name}: no positive time"))
            continue
        ref = identity(label.device, label.trace, node.name, match.key, time_ms)
        if ref in ids.results:
            counts.duplicate += 1
            continue
        ids.results.add(ref)
        provenance: dict[str, Any] = {
            "source": data.source.name,
            "file": label.trace,
            "line": node.line,
            "node": node.name,
            "target": node.form,
            "match": match.how,
            "fw_ms": node.fw_ms,
            "bw_ms": node.bw_ms,
            "acc_ms": node.acc_ms,
            "run": label.spec_name,
        }
        if match.ambiguous:
            provenance["ambiguous"] = match.ambiguous
        rows.append(
            measurement_row(
                config[match.key],
                time_ms / 1000,
                kind_id=ids.kind,
                source_id=ids.source,
                ref=ref,
                provenance=provenance,
                dtype=spec.spec.model.dtype,
            )
        )
    counts.imported = queries.add_results(session, "measurements", rows)
    return summarize(label.trace, nodes, found, layers, mode)


def summarize(
    file: str, nodes: Sequence[TraceNode], found: TraceMatch, layers: int, mode: str
) -> TraceSummary:
    """Return a trace's mapping with the first layer's nodes counted ``layers`` times."""

    def ms(node: TraceNode) -> float:
        time = node.fw_ms if mode == "inference" else node.latency_ms
        return time * (layers if layers > 0 and node.in_layer0 else 1)

    forms: Counter[str] = Counter()
    form_ms: dict[str, float] = {}
    for node in found.unmapped:
        forms[node.form] += 1
        form_ms[node.form] = form_ms.get(node.form, 0.0) + ms(node)
    ranked = sorted(form_ms, key=lambda f: -form_ms[f])[:UNMAPPED_SHOWN]
    return TraceSummary(
        file=file,
        nodes=len(nodes),
        mapped=len(found.matches),
        equivalent=sum(1 for m in found.matches if m.how != "same call"),
        unmapped=len(found.unmapped),
        python=len(found.python),
        mapped_ms=math.fsum(ms(m.node) for m in found.matches),
        total_ms=math.fsum(ms(n) for n in nodes),
        python_ms=math.fsum(ms(n) for n in found.python),
        unmapped_forms={f: [forms[f], form_ms[f]] for f in ranked},
    )
