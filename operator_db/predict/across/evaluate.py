"""The cross-device model checked on GPUs it never saw (``opdb predict across evaluate``).

Tables, each a list of rows (``Table``):

- **held-out GPUs** (a data set's test GPUs): fitted on the other GPUs only; per GPU and family,
  zero-shot and few-shot (its results at the calibration configurations, which are then not
  scored) median / mean absolute error and 90 % interval coverage on its test rows, beside two
  baselines: the roofline from its spec sheet, and the nearest training GPU's time × the ratio
  of the two GPUs' roofline bounds;
- **leave one GPU out** over every GPU with results: each predicted by the model of the others
  (the folds of :func:`train.fit_across`); its intervals from the other folds' residuals;
- **a GPU from elsewhere** (the H200's own measurements), zero-shot from the model of all GPUs;
- **whole models**: each measured run composed from predicted operators on its GPU with that
  GPU's results withheld, against the run, beside the published predictors' errors.

Scored rows are a GPU's test rows where the frame says (``test``), else its shared ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from operator_db.predict.across.features import roofline_s
from operator_db.predict.across.metrics import summary
from operator_db.predict.across.model import CAP, LEVEL, target_ln
from operator_db.predict.across.train import Across, fit_across, fold_intervals
from operator_db.predict.across.views import baseline_ln, measured_times
from operator_db.predict.devices import GpuFacts


@dataclass
class Table:
    """One printed table: a title, its column names and rows of cells."""

    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Run:
    """A measured whole-model run, its configurations, and what published predictors said."""

    kind: str
    model: str
    mode: str
    measured_s: float
    configs: pd.DataFrame
    """``features.config_frame`` of its configurations with a ``count`` column."""
    published: Mapping[str, float] = field(default_factory=dict)
    """Published predictors' errors, signed fractions, by predictor name."""


def _cells(s: Mapping[str, float]) -> list[Any]:
    if not s or not s.get("n"):
        return ["—", "—", "—", 0]
    cov = s.get("coverage")
    return [
        f"{s['median']:.1f}",
        f"{s['mean']:.1f}",
        "—" if cov is None or np.isnan(cov) else f"{cov:.0f}",
        int(s["n"]),
    ]


def _scored(rows: pd.DataFrame) -> pd.DataFrame:
    if "test" in rows and rows["test"].sum() >= 20:
        return rows[rows["test"].astype(bool)]
    return rows


def _baselines(
    rows: pd.DataFrame, frame: pd.DataFrame, facts: Mapping[str, GpuFacts], source: str
) -> tuple[dict[str, float], dict[str, float]]:
    """Return the roofline and nearest-GPU × bound-ratio baselines' summaries on ``rows``."""
    y = target_ln(rows)
    roof = summary(np.log(roofline_s(rows, facts)), y, -np.inf, np.inf)
    pred = baseline_ln(rows, facts, source, measured_times(frame[frame["kind"] == source]))
    ok = ~np.isnan(pred)
    if not ok.any():
        return roof, {}
    return roof, summary(pred[ok], y[ok], -np.inf, np.inf)


def held_out_table(
    frame: pd.DataFrame,
    facts: Mapping[str, GpuFacts],
    held_out: Sequence[str],
    *,
    cap: int = CAP,
    level: float = LEVEL,
    progress: Callable[[str], None] | None = None,
) -> tuple[Table, Across]:
    """Fit on every GPU but ``held_out`` and score each held-out GPU zero- and few-shot."""
    train = {k: f for k, f in facts.items() if k not in set(held_out)}
    across = fit_across(
        frame[frame["kind"].isin(list(train))], train, level=level, cap=cap, progress=progress
    )
    table = Table(
        f"Held-out GPUs (fitted on {', '.join(sorted(across.facts))}): median / mean |error| %,"
        f" {level:.0%} coverage %, n",
        [
            "GPU",
            "family",
            "from",
            "zero-shot",
            "",
            "",
            "n",
            "few-shot",
            "",
            "",
            "n",
            "roofline",
            "nearest × ratio",
            "chosen view",
        ],
    )
    for kind in held_out:
        if kind not in facts:
            continue
        mine = frame[frame["kind"] == kind]
        for family in sorted(across.families):
            rows = _scored(mine[mine["family"] == family])
            if rows.empty:
                continue
            zero = across.predict(rows, facts[kind])
            z = _summary(zero, rows)
            keys = set(across.calibration.get(family, []))
            cal = mine[(mine["family"] == family) & mine["key"].isin(keys)]
            query = rows[~rows["key"].isin(keys)]
            few = across.predict(query, facts[kind], cal) if len(cal) and len(query) else None
            w = _summary(few, query) if few is not None else {}
            source = str(zero["source"].iloc[0])
            roof, near = _baselines(rows, frame, {**facts}, source)
            table.rows.append(
                [
                    kind,
                    family,
                    source,
                    *_cells(z),
                    *_cells(w),
                    f"{roof['median']:.1f}",
                    f"{near['median']:.1f}" if near else "—",
                    str(across.families[family].view),
                ]
            )
    return table, across


def _summary(pred: pd.DataFrame, rows: pd.DataFrame) -> dict[str, float]:
    ok = pred["ln"].notna().to_numpy()
    ln = pred["ln"].to_numpy(np.float64)[ok]
    y = target_ln(rows)[ok]
    low = np.log(pred["low"].to_numpy(np.float64)[ok]) - ln
    high = np.log(pred["high"].to_numpy(np.float64)[ok]) - ln
    if not len(y):
        return {}
    s = summary(ln, y, -np.inf, np.inf)
    r = y - ln
    s["coverage"] = float(np.mean((r >= low) & (r <= high)) * 100)
    return s


def logo_table(
    across: Across, level: float = LEVEL, frame: pd.DataFrame | None = None, title: str = ""
) -> Table:
    """Score each fold of a model fitted with ``keep_folds``: intervals from the other folds.

    ``frame``: the results it was fitted on, for the baseline (the fold's source GPU's time of
    the same configuration × the ratio of the two rooflines; median |error| %).
    """
    table = Table(
        f"Leave one GPU out{title}: median / mean |error| %, {level:.0%} coverage %, n",
        ["GPU", "family", "from", "zero-shot", "", "", "n", "few-shot", "", "", "n"]
        + (["nearest × ratio"] if frame is not None else [])
        + ["chosen view (on the other folds)"],
    )
    by_family: dict[str, list[Any]] = {}
    for fold in across.folds:
        by_family.setdefault(fold.family, []).append(fold)
    for family, folds in sorted(by_family.items()):
        for f in sorted(folds, key=lambda f: f.kind):
            (zlo, zhi), (flo, fhi) = fold_intervals(folds, level, without=f.kind)
            y = target_ln(f.scored)
            z = summary(f.scored["zero"].to_numpy(np.float64), y, zlo, zhi)
            few = f.scored.dropna(subset=["few"]) if "few" in f.scored else f.scored.iloc[:0]
            w = (
                summary(few["few"].to_numpy(np.float64), target_ln(few), flo, fhi)
                if len(few)
                else {}
            )
            row = [f.kind, family, f.source, *_cells(z), *_cells(w)]
            if frame is not None:
                _, near = _baselines(f.scored, frame, across.facts, f.source)
                row.append(f"{near['median']:.1f}" if near else "—")
            table.rows.append([*row, str(f.model.view)])
    return table


def other_gpu_table(across: Across, rows: pd.DataFrame, target: GpuFacts) -> Table:
    """Score ``rows`` (results of a GPU the model never saw) zero-shot, per family."""
    table = Table(
        f"{target.name}, zero-shot from {', '.join(sorted(across.facts))}: median / mean "
        f"|error| %, {across.level:.0%} coverage %, n",
        ["family", "from", "zero-shot", "", "", "n", "roofline"],
    )
    rows = rows.assign(kind=target.name)
    facts = {**across.facts, target.name: target}
    for family, part in rows.groupby("family"):
        pred = across.predict(part, target)
        s = _summary(pred, part)
        if not s:
            continue
        roof = summary(np.log(roofline_s(part, facts)), target_ln(part), -np.inf, np.inf)
        source = str(pred["source"].dropna().iloc[0]) if pred["source"].notna().any() else "—"
        table.rows.append([family, source, *_cells(s), f"{roof['median']:.1f}"])
    return table


def whole_model_table(
    across: Across,
    runs: Sequence[Run],
    facts: Mapping[str, GpuFacts],
    frame: pd.DataFrame | None = None,
) -> Table:
    """Compose each run from predictions of the model that withheld its GPU.

    With ``frame`` (every GPU's results), also few-shot: calibrated by the GPU's results at the
    calibration configurations.
    """
    table = Table(
        "Whole models, each GPU's results withheld: signed error % of Σ count × predicted "
        "(coverage of calls), beside the published predictors",
        [
            "GPU",
            "model",
            "mode",
            "measured ms",
            "ours",
            "coverage",
            "interval holds",
            "ours few-shot",
            "NeuSight",
            "Habitat",
            "roofline",
        ],
    )
    for run in runs:
        model = _withheld(across, run.kind)
        target = facts.get(run.kind)
        if target is None or run.configs.empty:
            continue
        pred = model.predict(run.configs, target)
        ok = pred["ln"].notna().to_numpy()
        count = run.configs["count"].to_numpy(np.float64)
        total = float((pred["time_s"].to_numpy(np.float64)[ok] * count[ok]).sum())
        low = float((pred["low"].to_numpy(np.float64)[ok] * count[ok]).sum())
        high = float((pred["high"].to_numpy(np.float64)[ok] * count[ok]).sum())
        cov = float(count[ok].sum() / count.sum())
        err = (total - run.measured_s) / run.measured_s
        holds = "yes" if low <= run.measured_s <= high else "no"
        few = "—"
        if frame is not None:
            keys = {k for ks in model.calibration.values() for k in ks}
            mine = frame[(frame["kind"] == run.kind) & frame["key"].isin(keys)]
            if len(mine):
                fp = model.predict(run.configs, target, mine)
                fok = fp["ln"].notna().to_numpy()
                ftotal = float((fp["time_s"].to_numpy(np.float64)[fok] * count[fok]).sum())
                few = f"{(ftotal - run.measured_s) / run.measured_s:+.1%}"
        table.rows.append(
            [
                run.kind,
                run.model,
                run.mode,
                f"{run.measured_s * 1e3:.1f}",
                f"{err:+.1%}",
                f"{cov:.0%}",
                holds,
                few,
                *(
                    f"{run.published[p]:+.1%}" if p in run.published else "—"
                    for p in ("neusight", "habitat", "roofline")
                ),
            ]
        )
    return table


def _withheld(across: Across, kind: str) -> Across:
    """Return the model of the folds that held ``kind`` out (the model itself where none did)."""
    families = {f.family: f.model for f in across.folds if f.kind == kind}
    if not families:
        return across
    for family, m in families.items():
        folds = [f for f in across.folds if f.family == family]
        m.zero_interval, m.few_interval = fold_intervals(folds, across.level, without=kind)
    merged = {**{f: m for f, m in across.families.items() if kind not in m.offsets}, **families}
    return Across(
        merged,
        {k: v for k, v in across.facts.items() if k != kind},
        across.calibration,
        across.level,
        transfer=across.transfer,
    )


def mean_abs(table: Table, column: int, where: Callable[[list[Any]], bool]) -> float | None:
    """Return the mean |signed %| of a column over the rows ``where`` holds (None: no rows)."""
    vals = [
        abs(float(str(r[column]).rstrip("%")))
        for r in table.rows
        if where(r) and str(r[column]) not in ("—", "")
    ]
    return sum(vals) / len(vals) if vals else None
