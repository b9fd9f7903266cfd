"""The cross-device model and the database: what it is fitted on, storing it, predicting a model.

Its training data are every GPU kind's results (median per configuration, eager, warm caches):
measured and imported alike, each kind with a spec sheet in the chips table. A training run is
stored as one version (``cross_predictors``); predictions use the newest and say which.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import DeviceKind, as_utc
from operator_db.db.predictor_tables import CrossPredictor
from operator_db.errors import InvalidInputError, NotFoundError
from operator_db.estimate.predicted import Predicted, PredictedCost
from operator_db.predict.across.evaluate import Run
from operator_db.predict.across.features import config_frame
from operator_db.predict.across.model import CAP, LEVEL
from operator_db.predict.across.train import Across, fit_across
from operator_db.predict.devices import GpuFacts, gpu_facts
from operator_db.predict.features import dtype_of
from operator_db.predict.store import check_library, library_versions
from operator_db.roofline.chips import chip_spec, load_peak_table
from operator_db.roofline.record import store_spec_peaks

FLOAT32 = "float32"
OTHER_DTYPES = ("float16", "bfloat16")
"""Element types the cross-device model learns apart from float32, where two GPUs have results."""
_LOADED: dict[str, Across] = {}
"""The newest model unpickled in this process, by data hash and version (a server loads it once)."""


def register_gpus(session: Session) -> list[str]:
    """Store a device kind, with its spec peaks, for every GPU of the chips table it can place.

    So that a model can be estimated and compared on a GPU nobody has measured. A chip already
    stored under one of its names is left as it is. Returns the names of the kinds added.
    """
    stored = [k.name for k in queries.device_kinds(session)]
    added = []
    for chip in load_peak_table():
        if gpu_facts(chip.name) is None or any(chip_spec(n, [chip]) for n in stored):
            continue
        store_spec_peaks(session, chip, chip.name)
        added.append(chip.name)
    return added


def gpu_kinds(session: Session, dtype: str = FLOAT32) -> dict[str, tuple[DeviceKind, GpuFacts]]:
    """Return every stored GPU kind with a spec sheet the predictor can read, by name.

    ``dtype``: the element type whose peak the facts carry as ``flops_per_s``.
    """
    out = {}
    for kind in queries.device_kinds(session):
        facts = gpu_facts(kind.name, dtype) if kind.type == "gpu" else None
        if facts is not None:
            out[kind.name] = (kind, facts)
    return out


def results_frame(
    session: Session,
    kinds: Sequence[DeviceKind],
    config_ids: Sequence[int] | None = None,
    dtype: str = FLOAT32,
) -> pd.DataFrame:
    """Return one row per (configuration in ``dtype``, kind) measured: columns and ``time_s``."""
    if not kinds:
        return pd.DataFrame()
    names = {k.id: k.name for k in kinds}
    figures = queries.config_figures(
        session, config_ids, list(names), timing="eager", aggregate="median", cache_mode="warm"
    )
    times = pd.DataFrame(
        [(cid, names[kid], f.time_median_s) for (cid, kid, _), f in figures.items()],
        columns=["config_id", "kind", "time_s"],
    )
    if times.empty:
        return times
    configs = queries.configs_by_ids(session, sorted(set(times["config_id"])))
    frame = config_frame([c for c in configs if dtype_of(c) == dtype])
    if frame.empty:
        return frame
    times = times[times["time_s"] > 0]
    return frame.merge(times, on="config_id")


def _hash(frame: pd.DataFrame) -> str:
    digest = hashlib.sha256()
    for key, kind, t in sorted(zip(frame["key"], frame["kind"], frame["time_s"], strict=True)):
        digest.update(f"{key}\x1f{kind}\x1f{t:.9g}\n".encode())
    return digest.hexdigest()


def train(
    session: Session,
    *,
    level: float = LEVEL,
    cap: int = CAP,
    exclude: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
) -> tuple[Across, CrossPredictor]:
    """Fit the cross-device model on every GPU kind's results and store it as a new version.

    ``exclude``: kinds left out of training (to check the model on them).

    Raises:
        InvalidInputError: fewer than two GPU kinds with results of any family.
    """
    register_gpus(session)
    fitted: dict[str, Across] = {}
    frames = []
    for dtype in (FLOAT32, *OTHER_DTYPES):
        known = gpu_kinds(session, dtype)
        kinds = [k for name, (k, _) in known.items() if name not in set(exclude)]
        frame = results_frame(session, kinds, dtype=dtype)
        facts = {name: f for name, (_, f) in known.items()}
        if len(frame) and frame["kind"].nunique() >= 2:
            found = fit_across(frame, facts, level=level, cap=cap, progress=progress, dtype=dtype)
            if found.families:
                fitted[dtype] = found
                frames.append(frame.assign(dtype=dtype))
    if not fitted:
        raise InvalidInputError(
            "too few GPU results to learn across devices: it needs two GPU kinds with a spec "
            "sheet and results of one operator family (import a data set: `opdb import`)"
        )
    across = fitted.pop(FLOAT32, None) or Across({}, {}, {}, level)
    across.others = fitted
    every = {"": across, **{f" ({d})": a for d, a in fitted.items()}}
    row = CrossPredictor(
        kinds=sorted({k for a in every.values() for k in a.facts}),
        families={
            f + suffix: {
                "rows": m.rows,
                "zero_interval": list(m.zero_interval),
                "few_interval": list(m.few_interval),
                "calibration": len(a.calibration.get(f, [])),
            }
            for suffix, a in every.items()
            for f, m in a.families.items()
        },
        rows=sum(a.rows for a in every.values()),
        seconds=sum(a.seconds for a in every.values()),
        level=level,
        data_hash=_hash(pd.concat(frames)),
        model=pickle.dumps(across),
        library=library_versions(),
    )
    return across, queries.add_cross_predictor(session, row)


def load(session: Session) -> tuple[Across, CrossPredictor] | None:
    """Return the newest stored cross-device model and its row, or None where none was trained.

    Raises:
        InvalidInputError: it was fitted with another scikit-learn (retrain it).
    """
    row = queries.latest_cross_predictor(session, with_model=False)
    if row is None:
        return None
    cached = _LOADED.get(row.data_hash + str(row.version))
    if cached is not None:
        return cached, row
    check_library(
        row.library, f"the cross-device model v{row.version}", "opdb predict across train"
    )
    across = pickle.loads(row.model)  # noqa: S301 - written by `opdb predict across train`
    _LOADED.clear()  # one model kept: the newest
    _LOADED[row.data_hash + str(row.version)] = across
    return across, row


def require(session: Session) -> tuple[Across, CrossPredictor]:
    """Return :func:`load`'s model.

    Raises:
        NotFoundError: none was trained.
    """
    found = load(session)
    if found is None:
        raise NotFoundError(
            "no cross-device model: train one with `opdb predict across train` "
            "(after `opdb import` of a data set of other GPUs)"
        )
    return found


def describe(
    row: CrossPredictor,
    across: Across,
    kind: str,
    modes: set[str],
    views: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Return what identifies a cross-device prediction: version, kinds, mode, views, level.

    ``views``: each predicted family's view (``views.View``: learned, the nearest GPU × ratio,
    a blend; ``own``, ``few-shot`` where it did not predict zero-shot).
    """
    return {
        "version": row.version,
        "device_kind": kind,
        "method": "across devices",
        "mode": ", ".join(sorted(modes)) or None,
        "views": dict(sorted((views or {}).items())),
        "from_kinds": sorted(across.facts),
        "trained_at": as_utc(row.created_at).isoformat(),
        "samples": row.rows,
        "data_hash": row.data_hash,
        "level": row.level,
    }


def predicted_costs(
    session: Session,
    model_name: str,
    device_kind: str,
    found: tuple[Across, CrossPredictor] | None = None,
) -> Predicted:
    """Return the cross-device per-call time of each configuration of ``model_name`` on a GPU.

    The GPU's own results of the families (if any) calibrate it (few-shot). ``found``: a model
    already loaded.

    Raises:
        NotFoundError: unknown model, or no cross-device model was trained.
        InvalidInputError: the kind has no spec sheet the predictor can read.
    """
    got = predicted_costs_many(session, model_name, [device_kind], found)[device_kind]
    if isinstance(got, InvalidInputError):
        raise got
    return got


def predicted_costs_many(
    session: Session,
    model_name: str,
    device_kinds: Sequence[str],
    found: tuple[Across, CrossPredictor] | None = None,
) -> dict[str, Predicted | InvalidInputError]:
    """Return :func:`predicted_costs` on each kind, by name, predicted together.

    A kind the predictor cannot place (no spec sheet) gets the error that says why.

    Raises:
        NotFoundError: unknown model, or no cross-device model was trained.
    """
    model = queries.get_model(session, model_name)
    out: dict[str, Predicted | InvalidInputError] = {}
    targets: list[GpuFacts] = []
    for name in device_kinds:
        target = gpu_facts(name)
        if target is None:
            out[name] = InvalidInputError(
                f"{name} has no GPU spec sheet in the chips table (SMs, clocks, L2, compute "
                "capability, power, memory type): the cross-device model cannot place it"
            )
        else:
            targets.append(target)
    if not targets:
        return out
    across, row = found or require(session)
    configs = [mc.config for mc in queries.model_configs(session, model.id)]
    query = config_frame(configs)
    if query.empty:
        out.update(
            {
                t.name: Predicted(time={}, source=describe(row, across, t.name, set()))
                for t in targets
            }
        )
        return out
    measured: dict[str, pd.DataFrame] = {}
    families = sorted(set(query["family"]))
    keys = {k for f in families for k in across.calibration.get(f, [])}
    ids = sorted(queries.config_ids_by_key(session, sorted(keys)).values()) if keys else []
    for t in targets:
        kind = queries.find_device_kind(session, t.name)
        if kind is not None and t.name not in across.facts and ids:
            measured[t.name] = results_frame(session, [kind], ids)
    predicted = across.predict_many(query, targets, measured)
    for t in targets:
        done = predicted[t.name].join(query[["key", "family"]]).dropna(subset=["ln"])
        costs = {
            str(r.key): PredictedCost(float(r.time_s), float(r.low), float(r.high))
            for r in done.itertuples()
        }
        views = dict(zip(done["family"].astype(str), done["view"].astype(str), strict=True))
        out[t.name] = Predicted(
            time=costs, source=describe(row, across, t.name, set(done["mode"]), views)
        )
    return out


def evaluation_frame(
    session: Session, dtype: str = FLOAT32
) -> tuple[pd.DataFrame, dict[str, GpuFacts]]:
    """Return every GPU kind's results in ``dtype``, and their spec sheets with its peak.

    Results from a data set's ``test/`` files are marked ``test``.
    """
    known = gpu_kinds(session, dtype)
    frame = results_frame(session, [k for k, _ in known.values()], dtype=dtype)
    facts = {name: f for name, (_, f) in known.items()}
    if frame.empty:
        return frame, facts
    names = {k.id: name for name, (k, _) in known.items()}
    test: set[tuple[int, str]] = set()
    for source in queries.data_sources(session):
        for config_id, kind_id, file in queries.result_files(session, source.id):
            if "/test/" in f"/{file}" and kind_id in names:
                test.add((config_id, names[kind_id]))
    frame["test"] = [(c, k) in test for c, k in zip(frame["config_id"], frame["kind"], strict=True)]
    return frame, facts


def measured_runs(session: Session, facts: dict[str, GpuFacts]) -> list[Run]:
    """Return every measured whole-model run on a GPU kind, with its configurations and counts."""
    kinds = {k.id: k.name for k in queries.device_kinds(session) if k.name in facts}
    figures = queries.model_figures(session, None, list(kinds), aggregate="median")
    models = {m.id: m for m in queries.list_models(session)}
    links = queries.models_configs(session, sorted({mid for mid, _, _ in figures}))
    runs = []
    for (model_id, kind_id, _), figure in sorted(figures.items()):
        model = models.get(model_id)
        if model is None or (model.dtype or FLOAT32) != FLOAT32:
            continue
        mcs = links.get(model_id, [])
        frame = config_frame([mc.config for mc in mcs])
        if frame.empty:
            continue
        counts = {mc.config.key: mc.count for mc in mcs}
        frame["count"] = frame["key"].map(counts).astype(float)
        runs.append(Run(kinds[kind_id], model.name, model.mode, figure.time_median_s, frame))
    return runs
