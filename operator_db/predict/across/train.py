"""Fitting the cross-device model on every GPU's results, and predicting a GPU with it.

:func:`fit_across` fits each family (``model.fit_family``) on the GPUs with enough of its results,
then holds out each of them in turn (leave-one-GPU-out) to calibrate the intervals: the held-out
GPU's scored rows are predicted zero-shot, and few-shot from its results at the calibration
configurations (``fewshot.design``). Scored rows are its results of configurations measured on at
least ``POOL_KINDS`` GPUs (a data set's shared test shapes), all its results where too few.
:meth:`Across.predict` predicts any GPU with a spec sheet: its own model where it trained, else
few-shot from what it has measured of the family, else zero-shot.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from operator_db.predict.across.fewshot import calibrated, design
from operator_db.predict.across.model import (
    CAP,
    LEVEL,
    MIN_KIND_ROWS,
    FamilyModel,
    _sample,
    conformal,
    fit_family,
    large,
    target_ln,
)
from operator_db.predict.across.transfer import Transfer, fit_transfer
from operator_db.predict.across.views import (
    LEARNED,
    Score,
    choose,
    floors,
    measured_times,
    scores,
    view_ln,
)
from operator_db.predict.devices import GpuFacts, gpu_facts

Mode = Literal["own", "few-shot", "zero-shot"]
COLUMNS = ["ln", "low", "high", "mode", "source", "view"]
"""A prediction's columns (:meth:`Across.predict`)."""
FLOAT32 = "float32"
STAND_IN = {"bfloat16": "float16"}
"""An element type predicted by another's model where it has none of its own, with its own peak
(bfloat16 and float16 run at the same tensor-core rate on every GPU since Ampere)."""
POOL_KINDS = 3
"""GPUs a configuration is measured on to be a candidate for calibration and a scored row."""
MIN_SCORED = 20
WORKERS = max(1, os.cpu_count() or 1)
"""Fits at once."""


@dataclass
class Fold:
    """One training GPU held out: its rows predicted by the model of the others."""

    kind: str
    family: str
    model: FamilyModel
    source: str
    """The training GPU its zero-shot prediction took."""
    scored: pd.DataFrame
    """Its scored rows with ``zero`` (the chosen view), ``learned`` (and ``few`` where
    calibrated) ln predictions."""
    scores: list[Score] = field(default_factory=list)
    """Every candidate view's median |error| on its rows (``views.scores``)."""


@dataclass
class Across:
    """The fitted cross-device model: per family, and the spec sheets it was fitted with."""

    families: dict[str, FamilyModel]
    facts: dict[str, GpuFacts]
    """Spec sheet of each training GPU."""
    calibration: dict[str, list[str]]
    """Configuration keys to calibrate a new GPU on, per family."""
    level: float = LEVEL
    folds: list[Fold] = field(default_factory=list)
    seconds: float = 0.0
    rows: int = 0
    transfer: Transfer | None = None
    """Configurations of families without a model, moved from the GPUs that measured them."""
    others: dict[str, Across] = field(default_factory=dict)
    """Models of other element types, by dtype (``float16``): each fitted on that type's results,
    its GPUs' spec sheets with that type's peak."""
    dtype: str = FLOAT32
    """The element type of its own rows (its spec sheets carry that type's peak)."""

    def _split(self, query: pd.DataFrame) -> dict[str, pd.DataFrame]:
        """Return ``query``'s rows by element type (all its own where it has no ``dtype``)."""
        own = getattr(self, "dtype", FLOAT32)
        if "dtype" not in query or query.empty:
            return {own: query}
        return {str(d): part for d, part in query.groupby("dtype")}

    def predict(
        self,
        query: pd.DataFrame,
        target: GpuFacts,
        measured: pd.DataFrame | None = None,
    ) -> pd.DataFrame:
        """Predict ``query`` (config rows) on ``target``; ``measured``: its results (``time_s``).

        Returns one row per query row (same index): ``ln`` (ln s), ``low``, ``high`` (s, the
        interval), ``time_s``, ``mode``, ``source`` (the GPU whose offset and profile it took) and
        ``view`` (zero-shot: the family's chosen view, ``views.View``; else the mode), NaN where
        the family has no model. Each row goes to its element type's model (its
        ``dtype`` column: :attr:`others`, or their :data:`STAND_IN`), NaN where there is none.
        """
        from threadpoolctl import threadpool_limits

        parts = []
        with threadpool_limits(1):  # a few rows: threads only fight (10x slower on 2 cores)
            for dtype, rows in self._split(query).items():
                mine = None if measured is None else measured[_of(measured, dtype)]
                if dtype == getattr(self, "dtype", FLOAT32):
                    parts.append(self._predict(rows, target, mine))
                    continue
                others = getattr(self, "others", {})
                other = others.get(dtype) or others.get(STAND_IN.get(dtype, ""))
                facts = gpu_facts(target.name, dtype)
                if other is None or facts is None:
                    parts.append(_unpredicted(rows))
                else:
                    parts.append(other._predict(rows, facts, mine))
        return pd.concat(parts).loc[query.index] if len(parts) > 1 else parts[0]

    def predict_many(
        self,
        query: pd.DataFrame,
        targets: Sequence[GpuFacts],
        measured: Mapping[str, pd.DataFrame] | None = None,
    ) -> dict[str, pd.DataFrame]:
        """Return :meth:`predict` of ``query`` on each target, by name (the same figures).

        ``measured``: each target's own results (``time_s``), where it has some. The targets
        predicted zero-shot (no results of their own) are predicted together:
        one call of a family's shared model for all of them and one of each source GPU's profile,
        instead of both per target (a comparison across every kind: 15 kinds, 5 families); so
        are training GPUs (their own offset and profile). A target with results of its own
        (few-shot) is fitted to them alone.
        """
        from threadpoolctl import threadpool_limits

        measured = measured or {}
        parts = self._split(query)
        if set(parts) != {getattr(self, "dtype", FLOAT32)}:  # other element types: one by one
            return {t.name: self.predict(query, t, measured.get(t.name)) for t in targets}
        out: dict[str, pd.DataFrame] = {}
        batched: list[GpuFacts] = []
        with threadpool_limits(1):
            for t in targets:
                mine = measured.get(t.name)
                if mine is not None and not mine.empty:
                    out[t.name] = self._predict(query, t, mine)  # few-shot: its own fit
                else:
                    batched.append(t)
            if batched:
                out.update(self._unfitted_many(query, batched))
        return out

    def _unfitted_many(
        self, query: pd.DataFrame, targets: Sequence[GpuFacts]
    ) -> dict[str, pd.DataFrame]:
        """Predict targets without results given: zero-shot, or a training GPU's own."""
        facts = {**self.facts, **{t.name: t for t in targets}}
        stacked = pd.concat(
            [query.assign(kind=t.name, _target=i) for i, t in enumerate(targets)],
            ignore_index=True,
        )
        out = pd.DataFrame(index=stacked.index, columns=COLUMNS)
        for family, rows in stacked.groupby("family"):
            model = self.families.get(str(family))
            if model is None:
                for i, part in rows.groupby("_target"):
                    self._transfer(part, targets[int(i)], facts, out)
                continue
            sources = {
                i: t.name if t.name in model.offsets else model.source_for(t, facts)
                for i, t in enumerate(targets)
            }
            own = {i: t.name in model.offsets for i, t in enumerate(targets)}
            source = rows["_target"].map(sources)
            is_own = rows["_target"].map(own).to_numpy(bool)
            ln = model.shared_ln(rows, facts) + source.map(model.offsets).to_numpy(np.float64)
            ln = 0.5 * ln
            for name, part in rows.groupby(source):
                at = rows.index.get_indexer(part.index)
                ln[at] += 0.5 * model.profile_ln(str(name), part, facts)
                zero = ~is_own[at]
                if zero.any():  # targets it predicts zero-shot: by the chosen view
                    ln[at[zero]] = model.chosen_ln(
                        part[zero], facts, str(name), learned=ln[at[zero]]
                    )
            lo = np.where(is_own, model.few_interval[0], model.zero_interval[0])
            hi = np.where(is_own, model.few_interval[1], model.zero_interval[1])
            out.loc[rows.index, "ln"] = ln
            out.loc[rows.index, "low"] = np.exp(ln + lo)
            out.loc[rows.index, "high"] = np.exp(ln + hi)
            out.loc[rows.index, "mode"] = np.where(is_own, "own", "zero-shot")
            out.loc[rows.index, "source"] = source.to_numpy()
            out.loc[rows.index, "view"] = np.where(is_own, "own", _view(model))
        out["time_s"] = np.exp(out["ln"].astype(float))
        result = {}
        for i, t in enumerate(targets):
            part = out[(stacked["_target"] == i).to_numpy()]
            result[t.name] = part.set_axis(query.index)
        return result

    def _predict(
        self, query: pd.DataFrame, target: GpuFacts, measured: pd.DataFrame | None
    ) -> pd.DataFrame:
        facts = {**self.facts, target.name: target}
        out = pd.DataFrame(index=query.index, columns=COLUMNS)
        for family, rows in query.groupby("family"):
            model = self.families.get(str(family))
            if model is None:
                self._transfer(rows, target, facts, out)
                continue
            rows = rows.assign(kind=target.name)
            own = target.name in model.offsets
            source = target.name if own else model.source_for(target, facts)
            cal = _mine(measured, str(family), target.name)
            if own:
                ln, interval, mode = (
                    model.zero_shot_ln(rows, facts, source),
                    model.few_interval,
                    "own",
                )
            elif len(cal):
                ln = calibrated(model, rows, cal, facts, source)
                interval, mode = model.few_interval, "few-shot"
            else:
                ln = model.chosen_ln(rows, facts, source)
                interval, mode = model.zero_interval, "zero-shot"
            out.loc[rows.index, "ln"] = ln
            out.loc[rows.index, "low"] = np.exp(ln + interval[0])
            out.loc[rows.index, "high"] = np.exp(ln + interval[1])
            out.loc[rows.index, "mode"] = mode
            out.loc[rows.index, "source"] = source
            out.loc[rows.index, "view"] = _view(model) if mode == "zero-shot" else mode
        out["time_s"] = np.exp(out["ln"].astype(float))
        return out

    def _transfer(
        self,
        rows: pd.DataFrame,
        target: GpuFacts,
        facts: Mapping[str, GpuFacts],
        out: pd.DataFrame,
    ) -> None:
        if self.transfer is None:
            return
        lo, hi = self.transfer.interval
        for index, key in zip(rows.index, rows["key"], strict=True):
            found = self.transfer.moved(str(key), target, facts)
            if found is not None:
                ln, source = found
                out.loc[index, COLUMNS] = [
                    ln,
                    np.exp(ln + lo),
                    np.exp(ln + hi),
                    "moved",
                    source,
                    "nearest × ratio",
                ]


def _view(model: FamilyModel) -> str:
    """Return the name of a family model's zero-shot view (learned where pickled before)."""
    return str(getattr(model, "view", LEARNED))


def _unpredicted(rows: pd.DataFrame) -> pd.DataFrame:
    """Return :meth:`Across.predict`'s frame for rows no model predicts: NaN throughout."""
    out = pd.DataFrame(index=rows.index, columns=COLUMNS)
    out["time_s"] = np.nan
    return out


def _of(measured: pd.DataFrame, dtype: str) -> Any:
    """Return which of ``measured``'s rows are in ``dtype`` (all where it has no column)."""
    if "dtype" not in measured:
        return np.full(len(measured), True)
    return (measured["dtype"] == dtype).to_numpy()


def _mine(measured: pd.DataFrame | None, family: str, kind: str) -> pd.DataFrame:
    if measured is None or measured.empty:
        return pd.DataFrame()
    return measured[(measured["family"] == family)].assign(kind=kind)


def pool_keys(frame: pd.DataFrame, kinds: int = POOL_KINDS) -> set[str]:
    """Return the configurations measured on at least ``kinds`` GPUs of ``frame``."""
    counts = frame.groupby("key")["kind"].nunique()
    return set(counts[counts >= kinds].index)


def calibration_keys(frame: pd.DataFrame, family: str, facts: Mapping[str, GpuFacts]) -> list[str]:
    """Return the configurations a new GPU calibrates ``family`` on (``fewshot.design``).

    Candidates are configurations measured on several GPUs (``POOL_KINDS``) and large on every
    one of them (``model.LARGE_ROOF_S``): a launch-bound configuration says nothing of a GPU's
    efficiency, and the farthest-point design would pick the smallest there is.
    """
    pool = frame[(frame["family"] == family) & frame["key"].isin(pool_keys(frame))]
    big = pool.assign(big=large(pool, facts)).groupby("key")["big"].all()
    pool = pool[pool["key"].isin(set(big[big].index))]
    pool = pool.drop_duplicates("key").sort_values("key").reset_index(drop=True)
    return [str(pool["key"].iloc[i]) for i in design(pool, family)]


def scored_rows(rows: pd.DataFrame, pool: set[str]) -> pd.DataFrame:
    """Return a GPU's rows an evaluation scores.

    Its test rows where marked, else its shared configurations (all its rows if too few).
    """
    if "test" in rows and rows["test"].sum() >= MIN_SCORED:
        return rows[rows["test"].astype(bool)]
    shared = rows[rows["key"].isin(pool)]
    return shared if len(shared) >= MIN_SCORED else rows


def fit_across(
    frame: pd.DataFrame,
    facts: Mapping[str, GpuFacts],
    *,
    level: float = LEVEL,
    cap: int = CAP,
    keep_folds: bool = False,
    progress: Callable[[str], None] | None = None,
    dtype: str = FLOAT32,
) -> Across:
    """Fit every family with at least two training GPUs, and its intervals by holding each out.

    ``frame``: one row per (configuration, GPU) with ``kind`` and ``time_s`` and the
    configuration's columns (``features.config_row``); ``facts``: each GPU's spec sheet (rows of
    GPUs without one are left out). ``cap``: rows per GPU and family fitted on at most.
    ``dtype``: the element type of the rows (``facts`` carry its peak).
    """
    start = time.perf_counter()
    frame = frame[frame["kind"].isin(list(facts))]
    pool = pool_keys(frame)
    data: dict[str, pd.DataFrame] = {}
    kinds: dict[str, list[str]] = {}
    times: dict[str, dict[str, dict[str, float]]] = {}
    lows: dict[str, dict[str, dict[str, float]]] = {}
    for family, part in frame.groupby("family"):
        counts = part.groupby("kind").size()
        fitted = sorted(str(k) for k in counts[counts >= MIN_KIND_ROWS].index)
        if len(fitted) >= 2:
            theirs = part[part["kind"].isin(fitted)]
            kinds[str(family)] = fitted
            data[str(family)] = _sample(theirs, cap)
            times[str(family)] = measured_times(theirs)
            lows[str(family)] = floors(theirs)
    calibration = {f: calibration_keys(d, f, facts) for f, d in data.items()}
    from threadpoolctl import threadpool_limits

    # Fits release the GIL: one thread each (a shared machine: one OpenMP thread per fit is
    # several times faster than many), as many fits at once as there are CPUs.
    with threadpool_limits(1), ThreadPoolExecutor(max_workers=WORKERS) as pool_exec:
        finals = dict(
            zip(data, pool_exec.map(lambda f: fit_family(f, data[f], facts), data), strict=True)
        )
        for family, final in finals.items():
            final.times, final.floors = times[family], lows[family]
        tasks = [(f, k) for f in data for k in kinds[f]]
        done = list(
            pool_exec.map(
                lambda t: _fold(
                    t[0], data[t[0]], t[1], finals[t[0]], facts, calibration[t[0]], pool
                ),
                tasks,
            )
        )
    folds: list[Fold] = []
    for family, final in finals.items():
        mine = [fold for fold in done if fold.family == family]
        final.scores = [s for fold in mine for s in fold.scores]
        final.view = choose(final.scores)
        if final.view.learned >= 1.0:  # the times only serve the nearest GPU's views
            final.times = {}
        for fold in mine:  # each fold by the view chosen on the others: a choice it never saw
            fold.model.view = choose(final.scores, without=fold.kind)
            fold.scored["zero"] = view_ln(
                fold.model,
                fold.model.view,
                fold.scored,
                facts,
                fold.source,
                learned=fold.scored["learned"].to_numpy(np.float64),
            )
        final.zero_interval, final.few_interval = fold_intervals(mine, level)
        if keep_folds:
            folds.extend(mine)
        if progress:
            progress(
                f"{family}: {len(data[family])} rows on {len(kinds[family])} GPUs, "
                f"zero-shot by {final.view}"
            )
    used = {k for m in finals.values() for k in m.offsets}
    rest = frame[~frame["family"].isin(list(finals))]
    transfer = fit_transfer(rest, facts, level) if len(rest) else None
    used |= set(rest["kind"])
    return Across(
        finals,
        {k: facts[k] for k in sorted(used)},
        calibration,
        level,
        folds,
        time.perf_counter() - start,
        sum(len(d) for d in data.values()) + len(rest),
        transfer,
        dtype=dtype,
    )


def few_residuals(scored: pd.DataFrame) -> np.ndarray:
    """Return ln(measured / few-shot prediction) of a fold's scored rows (empty: no few-shot)."""
    if "few" not in scored:
        return np.array([])
    f = scored.dropna(subset=["few"])
    return np.asarray(target_ln(f) - f["few"].to_numpy(np.float64))


def fold_intervals(
    folds: Sequence[Fold], level: float = LEVEL, without: str | None = None
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Return the zero- and few-shot intervals (ln ratios) from one family's folds.

    Zero-shot: ± the largest of the held-out GPUs' ``level`` quantiles of |residual| (GPUs
    differ more than rows do, and a new GPU may be off either way: the A40 from the A100 is
    high where the A100 from the A40 is low; the union of each fold's own signed quantiles
    covered under 85 % on 6 of 29 leave-one-GPU-out folds, this on 3); few-shot: one interval of
    the pooled residuals. ``without``: leave that GPU's fold out, so a GPU's figures are scored
    with intervals it took no part in.
    """
    used = [f for f in folds if f.kind != without]
    zero = [
        float(
            np.quantile(np.abs(target_ln(f.scored) - f.scored["zero"].to_numpy(np.float64)), level)
        )
        for f in used
        if len(f.scored)
    ]
    few = [few_residuals(f.scored) for f in used]
    pooled = np.concatenate(few) if few else np.array([])
    return (
        (-max(zero), max(zero)) if zero else (-np.inf, np.inf),
        conformal(pooled, level),
    )


def _fold(
    family: str,
    data: pd.DataFrame,
    kind: str,
    final: FamilyModel,
    facts: Mapping[str, GpuFacts],
    keys: list[str],
    pool: set[str],
) -> Fold:
    """Hold out ``kind``: fit the others, predict its scored rows zero-shot and few-shot."""
    others = data[data["kind"] != kind]
    profiles = {k: p for k, p in final.profiles.items() if k != kind}
    model = fit_family(family, others, facts, profiles)
    model.profiles = profiles
    model.times, model.floors = final.times, final.floors
    mine = data[data["kind"] == kind]
    scored = scored_rows(mine, pool).copy()
    source = model.source_for(facts[kind], facts)
    scored["learned"] = model.zero_shot_ln(scored, facts, source)
    scored["zero"] = scored["learned"]
    found = scores(model, kind, scored, facts, source, scored["learned"].to_numpy(np.float64))
    cal = mine[mine["key"].isin(keys)]
    query = scored[~scored["key"].isin(keys)]
    if len(cal) and len(query):
        scored.loc[query.index, "few"] = calibrated(model, query, cal, facts, source)
    return Fold(kind, family, model, source, scored, found)
