"""Configurations no family model predicts, moved from the nearest GPU that measured them.

An embedding, an index, a cumulative sum: too few and too varied to learn across GPUs, but often
measured on other GPUs (a data set's traces of the same model). Such a configuration's time on a
GPU is the time of the nearest GPU that measured it (``devices.distances``), times the ratio of
the two rooflines where it is large there (``model.LARGE_ROOF_S``); a launch-bound one keeps its
time. The interval is split conformal over the same rule applied to each measured (configuration,
GPU) from the other GPUs: the ``level`` quantiles of those residuals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from operator_db.predict.across.features import MIN_BASE_S
from operator_db.predict.across.model import LARGE_ROOF_S, conformal
from operator_db.predict.devices import GpuFacts, distances
from operator_db.roofline.bounds import roofline_time_s


@dataclass
class Transfer:
    """Measured times by configuration and GPU, and the interval of moving them."""

    times: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per-call time, s, by configuration key and GPU."""
    work: dict[str, tuple[float, float]] = field(default_factory=dict)
    """(FLOPs, bytes) by configuration key."""
    interval: tuple[float, float] = (-np.inf, np.inf)

    def moved(
        self, key: str, target: GpuFacts, facts: Mapping[str, GpuFacts]
    ) -> tuple[float, str] | None:
        """Return (ln time on ``target``, the GPU it came from), None where none measured it."""
        there = {
            k: t for k, t in self.times.get(key, {}).items() if k != target.name and k in facts
        }
        if not there:
            return None
        near = distances(target, [facts[k] for k in there])
        source = min(near, key=lambda k: (near[k], k))
        flops, nbytes = self.work[key]
        roof = [
            max(roofline_time_s(flops, nbytes, g.flops_per_s, g.bytes_per_s), MIN_BASE_S)
            for g in (facts[source], target)
        ]
        ratio = roof[1] / roof[0] if roof[0] >= LARGE_ROOF_S else 1.0
        return float(np.log(there[source] * ratio)), source


def fit_transfer(frame: pd.DataFrame, facts: Mapping[str, GpuFacts], level: float) -> Transfer:
    """Keep ``frame``'s times (rows of families without a model) and calibrate the interval."""
    out = Transfer()
    for key, kind, t, flops, nbytes in zip(
        frame["key"], frame["kind"], frame["time_s"], frame["flops"], frame["bytes"], strict=True
    ):
        out.times.setdefault(str(key), {})[str(kind)] = float(t)
        out.work[str(key)] = (float(flops), float(nbytes))
    residuals = []
    for key, by_kind in out.times.items():
        for kind, t in by_kind.items():
            found = out.moved(key, facts[kind], facts) if len(by_kind) > 1 else None
            if found is not None:
                residuals.append(float(np.log(t)) - found[0])
    out.interval = conformal(residuals, level)
    return out
