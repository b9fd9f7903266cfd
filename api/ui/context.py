"""What a page computes beside the API's answers: a configuration's models, spec peaks as used.

A configuration's page lists the models that run it and its time in each one's replay; the
overview shows a kind's spec peaks as the roofline uses them (``roofline.peaks.KindPeaks``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from api.ui import trust
from operator_db.db import queries
from operator_db.db.models import DeviceKind
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.estimate.rows import finite_values
from operator_db.roofline.peaks import kind_peaks

CONFIG_MODELS = 50
"""Models a configuration's page lists (by name) with their replays' figures of it."""


def config_in_models(session: Session, key: str) -> dict[str, Any]:
    """Return the models that run a configuration and its time per call in each one's replay.

    ``uses``: (model, calls per pass) by name, ``uses_total`` how many in all; ``replays``: (model,
    kind, s per call) from each model's newest eager run that timed it in context.
    """
    config_id = queries.get_config(session, key).id
    uses, total = queries.config_models(session, config_id, limit=CONFIG_MODELS)
    kinds = {k.id: k.name for k in queries.device_kinds(session)}
    figures = queries.model_figures(session, [i for i, _, _ in uses], list(kinds), timing="eager")
    names = {i: n for i, n, _ in uses}
    replays = sorted(
        (names[model_id], kinds[kind_id], f.replay_per_call_s[config_id])
        for (model_id, kind_id, _), f in figures.items()
        if f.replay_per_call_s and config_id in f.replay_per_call_s
    )
    return {"uses": [(n, c) for _, n, c in uses], "uses_total": total, "replays": replays}


def spec_peaks(
    session: Session, kinds: Sequence[DeviceKind]
) -> dict[str, tuple[str, float, float]]:
    """Return each kind's spec-peak label and the factors its FLOP/s and bandwidth take.

    A spec peak is the chip's whole figure: a page shows it as the roofline uses it (scaled to
    the cores a CPU's hosts may use) and names it as ``opdb peaks`` does (a partial name match
    is the closest spec-sheet match, not the chip): ``KindPeaks.spec_label``.
    """
    out = {}
    for kind in kinds:
        known = kind_peaks(session, kind, kind.name)
        out[kind.name] = (known.spec_label, known.spec_flops_scale, known.spec_bytes_scale)
    return out


def trust_of(session: Session, name: str, estimate: Any) -> dict[str, Any]:
    """Return what the model page says of its chosen kind's estimate beyond the API's figures.

    ``args``: each configuration's arguments by key (its one-line description); ``doubtful``,
    ``flag_shares``, ``legend``: the share of time from flagged figures and what each flag
    means (``trust``); ``looped_alone``: what operators timed alone leave out, where it
    applies (``trust.looped_alone``).
    """
    rows = estimate.configurations if estimate is not None else []
    args: dict[str, Any] = {}
    kind_type = None
    if estimate is not None:
        kind_type = queries.get_device_kind(session, estimate.device_kind).type
        model_id = queries.get_model(session, name).id
        args = {c.config.key: c.config.args for c in queries.model_configs(session, model_id)}
    return {
        "args": args,
        "doubtful": trust.doubtful_share(rows),
        "flag_shares": trust.flag_shares(rows),
        "legend": trust.legend(trust.flags_in(rows)),
        "looped_alone": trust.looped_alone(kind_type, getattr(estimate, "sources", None)),
    }


def kind_summaries(
    session: Session, name: str, kinds: Sequence[str], between_ops_warn: float
) -> dict[str, Any]:
    """Return the estimate's summary of the model on each kind (the API's figures), by kind.

    What the model page's other kinds need: no ranking and paging of their configurations.
    """
    options = EstimateOptions(peaks="best", between_ops_warn=between_ops_warn)
    return {
        kind: finite_values(estimate_model(session, name, kind, options).summary())
        for kind in kinds
    }


def rank_s(summary: Any) -> float:
    """Return what ranks a kind on the model page, s: its run, else its estimate (none: last).

    ``summary``: an estimate's summary (a dict) or the API's ``EstimateOut``.
    """
    for field in ("full_run_time_s", "total_time_s"):
        value = summary.get(field) if isinstance(summary, dict) else getattr(summary, field, None)
        if isinstance(value, int | float) and value > 0:
            return float(value)
    return math.inf
