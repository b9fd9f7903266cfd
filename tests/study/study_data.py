"""A synthetic study stored by hand: CNN and transformer families, several batch sizes, both modes.

Used by the report tests, and to look at the report's plots with many points::

    .venv/bin/python -m tests.study.study_data /tmp/study-report 12

Figures are deterministic functions of FLOPs and bytes (no device): a GPU kind of the shipped
peak table (so its roofs are known) measures every model and, for the even-numbered families,
every configuration; a CPU kind measures the inference specs only, and one of its jobs failed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from sqlalchemy import select

from operator_db.db import queries
from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun, Job, Measurement, Model
from operator_db.db.queries import get_or_create_device_kind
from operator_db.db.store import Store
from operator_db.specs import SPEC_VERSION, parse_spec
from tests.helpers import result_row

GPU = "NVIDIA H100 80GB HBM3"
CPU = "cpu:Study CPU"
BATCHES = (1, 8, 32)
TRAIN_BATCHES = (8, 32)
FAILED = "RuntimeError: out of memory (synthetic)"


def _t(shape: list[int]) -> dict[str, Any]:
    return {"shape": shape, "dtype": "float32"}


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _op(
    op: str,
    inputs: list[list[int]],
    output: list[int],
    flops: int,
    *,
    params: int = 0,
    count: int = 1,
    form: str = "module",
    args: dict[str, Any] | None = None,
    view: bool = False,
    backward: float = 2.0,
) -> dict[str, Any]:
    nbytes = 0 if view else 4 * (sum(_numel(s) for s in inputs) + params + _numel(output))
    entry: dict[str, Any] = {
        "op": op,
        "form": form,
        "inputs": [_t(s) for s in inputs],
        "outputs": [_t(output)],
        "count": count,
        "flops": flops,
        "flop_rule": "synthetic",
        "bytes": nbytes,
        "params": params,
        "_backward": int(backward * flops),
    }
    if args is not None:
        entry["args"] = args
    return entry


def cnn_ops(b: int, i: int) -> list[dict[str, Any]]:
    """A small CNN: convolutions, batch norm, ReLU, a flatten view and a classifier."""
    w, hw = 16 * (i + 1), 32
    act = [b, w, hw, hw]
    return [
        _op(
            "torch.nn.Conv2d",
            [[b, 3, hw, hw]],
            act,
            2 * b * w * hw * hw * 3 * 9,
            params=3 * w * 9 + w,
            args={"in_channels": 3, "out_channels": w, "kernel_size": 3, "padding": 1},
        ),
        _op(
            "torch.nn.Conv2d",
            [act],
            act,
            2 * b * w * hw * hw * w * 9,
            params=w * w * 9 + w,
            count=i + 1,
            args={"in_channels": w, "out_channels": w, "kernel_size": 3, "padding": 1},
        ),
        _op(
            "torch.nn.BatchNorm2d",
            [act],
            act,
            4 * _numel(act),
            params=2 * w,
            count=i + 2,
            args={"num_features": w},
        ),
        _op("torch.nn.ReLU", [act], act, _numel(act), count=i + 2, backward=1.0),
        _op(
            "torch.nn.functional.adaptive_avg_pool2d",
            [act],
            [b, w, 1, 1],
            _numel(act),
            form="function",
            backward=0.5,
        ),
        _op("torch.flatten", [[b, w, 1, 1]], [b, w], 0, form="function", view=True),
        _op(
            "torch.nn.Linear",
            [[b, w]],
            [b, 10],
            2 * b * w * 10,
            params=w * 10 + 10,
            args={"in_features": w, "out_features": 10},
        ),
    ]


def transformer_ops(b: int, i: int) -> list[dict[str, Any]]:
    """A small transformer block: projections, attention (matmul, softmax), MLP, norms, adds."""
    d, s, h = 64 * (i + 1), 128, 4
    x = [b, s, d]
    scores = [b, h, s, s]
    return [
        _op(
            "torch.nn.Linear",
            [x],
            [b, s, 3 * d],
            2 * b * s * d * 3 * d,
            params=3 * d * d + 3 * d,
            args={"in_features": d, "out_features": 3 * d},
        ),
        _op(
            "torch.matmul",
            [[b, h, s, d // h], [b, h, d // h, s]],
            scores,
            2 * b * h * s * s * d // h,
            form="function",
        ),
        _op(
            "torch.nn.functional.softmax",
            [scores],
            scores,
            5 * _numel(scores),
            form="function",
            backward=1.0,
        ),
        _op(
            "torch.matmul",
            [scores, [b, h, s, d // h]],
            [b, h, s, d // h],
            2 * b * h * s * s * d // h,
            form="function",
        ),
        _op(
            "torch.nn.Linear",
            [x],
            x,
            2 * b * s * d * d,
            params=d * d + d,
            args={"in_features": d, "out_features": d},
        ),
        _op("torch.add", [x, x], x, _numel(x), form="function", count=2, backward=0.0),
        _op(
            "torch.nn.LayerNorm",
            [x],
            x,
            5 * _numel(x),
            params=2 * d,
            count=2,
            args={"normalized_shape": [d]},
        ),
        _op(
            "torch.nn.Linear",
            [x],
            [b, s, 4 * d],
            8 * b * s * d * d,
            params=4 * d * d + 4 * d,
            args={"in_features": d, "out_features": 4 * d},
        ),
        _op("torch.nn.GELU", [[b, s, 4 * d]], [b, s, 4 * d], 8 * b * s * d, backward=1.0),
        _op(
            "torch.nn.Linear",
            [[b, s, 4 * d]],
            x,
            8 * b * s * d * d,
            params=4 * d * d + d,
            args={"in_features": 4 * d, "out_features": d},
        ),
    ]


def family(i: int) -> tuple[str, str]:
    """Return family ``i``'s name and kind (``cnn`` or ``tf``), alternating."""
    kind = "cnn" if i % 2 == 0 else "tf"
    return f"{kind}{i // 2}", kind


def study_specs(families: int) -> list[dict[str, Any]]:
    """Return the specs of ``families`` families: inference at ``BATCHES``, training at
    ``TRAIN_BATCHES`` (named ``<family>-train-b<N>``, same reference and inputs)."""
    specs = []
    for i in range(families):
        name, kind = family(i)
        for mode, batches in (("inference", BATCHES), ("training", TRAIN_BATCHES)):
            for b in batches:
                ops = cnn_ops(b, i // 2) if kind == "cnn" else transformer_ops(b, i // 2)
                for op in ops:
                    backward = op.pop("_backward")
                    if mode == "training":
                        op["flops_backward"] = backward
                shape = [b, 3, 32, 32] if kind == "cnn" else [b, 128, 64 * (i // 2 + 1)]
                specs.append(
                    {
                        "spec_version": SPEC_VERSION,
                        "model": {
                            "name": f"{name}-train-b{b}" if mode == "training" else f"{name}-b{b}",
                            "reference": "module:operator_db.examples:mlp",
                            "overrides": {"family": name, "index": i},
                            "mode": mode,
                            "batch_size": b,
                            "inputs": [{"name": "x", "shape": shape, "dtype": "float32"}],
                        },
                        "operators": ops,
                    }
                )
    return specs


def _gpu_time(flops: float, nbytes: float) -> float:
    return max(flops / 3e13, nbytes / 2.0e12) + 6e-6


def seed_study(store: Store, families: int = 4) -> list[str]:
    """Store the synthetic study of ``families`` families; return its model names."""
    specs = study_specs(families)
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(s, f"{s['model']['name']}.yaml") for s in specs])
        gpu = get_or_create_device_kind(session, GPU, "gpu")
        cpu = get_or_create_device_kind(session, CPU, "cpu")
        models = {m.name: m for m in session.scalars(select(Model))}
        for spec in specs:
            model = models[spec["model"]["name"]]
            ops = spec["operators"]
            flops = sum(o["count"] * (o["flops"] + o.get("flops_backward", 0)) for o in ops)
            nbytes = sum(o["count"] * o["bytes"] for o in ops)
            training = model.mode == "training"
            gpu_s = 1.3 * _gpu_time(flops, nbytes * (3 if training else 1)) + 4e-5
            session.add(
                FullModelRun(
                    model_id=model.id,
                    device_kind_id=gpu.id,
                    **result_row(time_median_s=gpu_s, time_mean_s=gpu_s),
                )
            )
            if training:
                continue
            if model.name == f"{family(families - 1)[0]}-b32":
                session.add(
                    Job(
                        target="model",
                        model_id=model.id,
                        device_kind_id=cpu.id,
                        status="failed",
                        last_error=FAILED,
                    )
                )
                continue
            cpu_s = flops / 4e10 + nbytes / 2e10 + 2e-4
            session.add(
                FullModelRun(
                    model_id=model.id,
                    device_kind_id=cpu.id,
                    **result_row(time_median_s=cpu_s, time_mean_s=cpu_s),
                )
            )
        # Per-operator times on the GPU for the families of even index (both modes).
        measured = sorted(
            models[s["model"]["name"]].id
            for s in specs
            if s["model"]["overrides"]["index"] // 2 % 2 == 0
        )
        seen: set[int] = set()
        for configs in queries.models_configs(session, measured).values():
            for mc in configs:
                cfg = mc.config
                if cfg.id in seen:
                    continue
                seen.add(cfg.id)
                t = _gpu_time(cfg.flops or 0, cfg.bytes or 0)
                if cfg.mode == "training":
                    t = _gpu_time(
                        (cfg.flops or 0) + (cfg.flops_backward or 0), 3 * (cfg.bytes or 0)
                    )
                session.add(
                    Measurement(
                        config_id=cfg.id,
                        device_kind_id=gpu.id,
                        **result_row(time_median_s=t, time_mean_s=t),
                    )
                )
    return [s["model"]["name"] for s in specs]


if __name__ == "__main__":
    from operator_db.report import build_report

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/study-report")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    out.mkdir(parents=True, exist_ok=True)
    db = out / "study.db"
    db.unlink(missing_ok=True)
    url = f"sqlite:///{db}"
    with Store.open(url) as store:
        names = seed_study(store, n)
        with store.transaction(read_only=True) as session:
            print(build_report(session, out, models=names, fmt="md"))
