"""A database whose measurements follow the known cost law of :mod:`tests.predict.synthetic`."""

from __future__ import annotations

import math
import random
from typing import Any

from sqlalchemy import select

from operator_db.db.ingest import ingest_specs
from operator_db.db.models import DevicePeak, FullModelRun, Measurement, Model, OperatorConfig
from operator_db.db.queries import get_or_create_device_kind
from operator_db.db.store import Store
from operator_db.specs import parse_spec
from tests.helpers import linear_op, relu_op, result_row, spec_dict
from tests.predict.synthetic import OVERHEAD_S, PEAKS

KIND = "cpu:Law CPU"
EFFICIENCY = {"torch.nn.Linear": 0.6, "torch.nn.ReLU": 0.3}


def law_s(op: str, flops: int, nbytes: int) -> float:
    """The law of these models: roofline bound / the type's efficiency + a fixed overhead, s."""
    return PEAKS.bound_s(flops, nbytes) / EFFICIENCY[op] + OVERHEAD_S


def _model(name: str, batch: int, widths: list[int]) -> dict[str, Any]:
    ops = []
    for i, (a, b) in enumerate(zip(widths, widths[1:], strict=False)):
        ops.append(linear_op(a, b, batch, count=1 + i % 2))
        ops.append(relu_op([batch, b], count=1 + i % 2))
    return spec_dict(name, ops)


MODELS = {
    "net-a": (8, [64, 256, 192, 64]),
    "net-b": (32, [128, 512, 128]),
    "net-c": (16, [256, 1024, 768, 256]),
    "net-d": (64, [96, 384, 96]),
    "net-e": (4, [512, 2048, 512]),
}


def sweep_spec(rng: random.Random, n: int = 40) -> dict[str, Any]:
    """A sweep-like model of Linear and ReLU configurations, measured but never run whole."""
    widths = [2**e for e in range(5, 12)]
    ops = []
    seen = set()
    while sum(op["op"] == "torch.nn.Linear" for op in ops) < n:
        batch, a, b = rng.choice([1, 4, 16, 64]), rng.choice(widths), rng.choice(widths)
        if (batch, a, b) in seen:
            continue
        seen.add((batch, a, b))
        ops.append(linear_op(a, b, batch))
        if (batch, b) not in seen:
            seen.add((batch, b))
            ops.append(relu_op([batch, b]))
    spec = spec_dict("sweep-law", ops)
    spec["provenance"] = {"tool": "opdb sweep", "sweep": "law"}
    return spec


def fill(store: Store, *, unmeasured: tuple[str, ...] = ("net-e",), seed: int = 0) -> None:
    """Store the models and the sweep; measure them by the law (noise σ 3 %) and run them whole.

    Models in ``unmeasured`` are stored but nothing of theirs is measured.
    """
    rng = random.Random(seed)
    specs = [_model(name, batch, widths) for name, (batch, widths) in MODELS.items()]
    specs.append(sweep_spec(rng))
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(s, f"{s['model']['name']}.yaml") for s in specs])
        kind = get_or_create_device_kind(session, KIND, "cpu")
        session.add(
            DevicePeak(
                device_kind_id=kind.id,
                source="measured",
                dtype="float32",
                flops_per_s=PEAKS.flops_per_s,
            )
        )
        session.add(
            DevicePeak(
                device_kind_id=kind.id, source="measured", dtype=None, bytes_per_s=PEAKS.bytes_per_s
            )
        )
        skip: set[int] = set()
        for name in unmeasured:
            model = session.scalars(select(Model).where(Model.name == name)).one()
            skip |= {link.config_id for link in model.operators}
        for cfg in session.scalars(select(OperatorConfig).order_by(OperatorConfig.id)):
            if cfg.id in skip:
                continue
            t = law_s(cfg.op, cfg.flops or 0, cfg.bytes or 0) * math.exp(rng.gauss(0, 0.03))
            session.add(
                Measurement(
                    config_id=cfg.id,
                    device_kind_id=kind.id,
                    **result_row(time_median_s=t, energy_per_call_j=40 * t),
                )
            )
        for model in session.scalars(select(Model).where(Model.name.in_(list(MODELS)))):
            if model.name in unmeasured:
                continue
            total = math.fsum(
                link.count * law_s(link.config.op, link.config.flops, link.config.bytes)
                for link in model.operators
            )
            session.add(
                FullModelRun(
                    model_id=model.id, device_kind_id=kind.id, **result_row(time_median_s=total)
                )
            )
