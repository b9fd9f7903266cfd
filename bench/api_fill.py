"""bench_api's database: ≥ 200 models from the shipped specs and ≥ 1,000,000 results, cached.

Models are the shipped architectures (ResNet-50, MobileNetV2, BERT-base, two MLPs) at batch sizes
1, 2, 3, ..., each as it is, as a deeper sibling that runs the same configurations more often (like
ResNet-50 and ResNet-101 share theirs) and in bfloat16: ingested through the project's own
validation and ingest.
Results are then bulk-inserted (the fill is setup, not what is measured): on eight device kinds,
each covering part of the configurations, several results per configuration and kind (passes,
hosts, eager and CUDA-graph timing, warm and cold caches), with times from a roofline-like model
of the kind, energies from its power, raw samples and provenance of a realistic size.

A filled database is kept under a name made of its parameters (and the schema's revision), so a
second run with the same ones starts at once; it is filled under a temporary name and renamed
when complete, so an interrupted fill is never taken for a finished one.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import create_engine, insert, select, text
from sqlalchemy.engine import make_url

from operator_db.db import queries
from operator_db.db.engine import make_engine, make_sessionmaker
from operator_db.db.ingest import ingest_specs
from operator_db.db.migrate import head_revision, upgrade
from operator_db.db.models import FullModelRun, Measurement, ModelOperator, OperatorConfig
from operator_db.db.queries import PeakFigure
from operator_db.db.store import Store
from operator_db.roofline.chips import find_chip
from operator_db.roofline.record import store_spec_peaks
from operator_db.specs import SPEC_VERSION
from operator_db.specs.io import LoadedSpec, parse_spec

ROOT = Path(__file__).resolve().parent.parent
FILL_VERSION = 1
"""Bump when the fill changes, so that cached databases of the old fill are not reused."""
ARCHITECTURES = {
    "resnet50": "resnet50-b1.yaml",
    "mobilenetv2": "mobilenetv2-b1.yaml",
    "bert-base": "bert-base-b1.yaml",
    "mlp-deep": "mlp-deep-b8.yaml",
    "mlp-small": "mlp-small-b8.yaml",
}


@dataclass(frozen=True)
class Kind:
    """A device kind of the fill: what it is, its roofline and power, how much of it is measured."""

    name: str
    type: str
    flops_per_s: float
    bytes_per_s: float
    power_w: float
    idle_w: float
    coverage: float
    """Share of the configurations measured on this kind."""


KINDS = (
    Kind("NVIDIA H100 80GB HBM3", "gpu", 67e12, 3.35e12, 700, 70, 1.0),
    Kind("NVIDIA A100-SXM4-80GB", "gpu", 19.5e12, 2.0e12, 400, 55, 0.9),
    Kind("NVIDIA L4", "gpu", 30.3e12, 0.3e12, 72, 16, 0.7),
    Kind("Tesla T4", "gpu", 8.1e12, 0.32e12, 70, 10, 0.6),
    Kind("NVIDIA GeForce RTX 4090", "gpu", 82.6e12, 1.0e12, 450, 25, 0.5),
    Kind("cpu:AMD EPYC 9654 96-Core Processor", "cpu", 5.4e12, 0.46e12, 360, 110, 0.8),
    Kind("cpu:Intel(R) Xeon(R) Platinum 8480+", "cpu", 4.3e12, 0.3e12, 350, 100, 0.6),
    Kind("fake:FakeGPU", "fake", 10e12, 1e12, 100, 20, 0.3),
)
HOSTS_PER_KIND = 3
DAYS = 365
"""Results are spread over this many days before now."""


@dataclass(frozen=True)
class FillParams:
    """What a filled database holds; equal parameters mean the cached one is reused."""

    models: int
    measurements: int
    seed: int = 0

    def key(self) -> str:
        """Return a short hash of the parameters, the fill's version and the schema's head."""
        body = json.dumps(
            [self.models, self.measurements, self.seed, FILL_VERSION, head_revision()]
        )
        return hashlib.sha256(body.encode()).hexdigest()[:10]


def _rebatch(shape: list[int], base: int, batch: int) -> list[int]:
    return [batch, *shape[1:]] if shape and shape[0] == base else list(shape)


def _retype(tensor: dict[str, Any], dtype: str) -> None:
    if tensor.get("dtype", "float32") == "float32":
        tensor["dtype"] = dtype


def variant(data: dict[str, Any], name: str, batch: int, depth: int, dtype: str) -> dict[str, Any]:
    """Return a shipped spec at another batch size and float type, its inner operators ``depth`` ×.

    FLOPs scale with the batch, bytes with the batch and the element size; operators that become
    equal are merged (counts added); the call order is left out.
    """
    spec = copy.deepcopy(data)
    info = spec["model"]
    base = int(info.get("batch_size") or 1)
    info.update(name=name, batch_size=batch, description=f"{name}: bench_api's generated model")
    info["dtype"] = dtype
    for tensor in info["inputs"]:
        tensor["shape"] = _rebatch(tensor["shape"], base, batch)
    merged: dict[str, dict[str, Any]] = {}
    operators = spec["operators"]
    narrow = 2 if dtype != "float32" else 1
    for i, op in enumerate(operators):
        op.pop("key", None)
        if op.get("dtype") == "float32":
            op["dtype"] = dtype
        for tensor in (*op.get("inputs", []), *op.get("outputs", [])):
            tensor["shape"] = _rebatch(tensor["shape"], base, batch)
            _retype(tensor, dtype)
        for field, divisor in (("flops", 1), ("flops_backward", 1), ("bytes", narrow)):
            if op.get(field) is not None:
                op[field] = op[field] * batch // base // divisor
        if 0 < i < len(operators) - 1:
            op["count"] = op.get("count", 1) * depth
        identity = json.dumps(
            [
                op["op"],
                op.get("form"),
                op.get("args"),
                op.get("dtype"),
                op["inputs"],
                op.get("call"),
            ],
            sort_keys=True,
        )
        if identity in merged:
            merged[identity]["count"] = merged[identity].get("count", 1) + op.get("count", 1)
        else:
            merged[identity] = op
    spec["operators"] = list(merged.values())
    spec["spec_version"] = SPEC_VERSION
    # The call order (spec v3) no longer matches counts that were multiplied and merged: a
    # generated model has none, as a spec may (its estimates then compose operators alone).
    spec.pop("calls", None)
    spec.pop("syncs", None)
    return spec


VARIANTS = (("", 1, "float32"), ("-x2", 2, "float32"), ("-bf16", 1, "bfloat16"))
"""Per architecture and batch: the model, a deeper sibling sharing its configurations (as
ResNet-101 shares ResNet-50's), and the model in bfloat16 (configurations of its own)."""


def generate_specs(models: int) -> list[LoadedSpec]:
    """Return ``models`` validated specs: each architecture, batch 1, 2, ..., in three variants."""
    bases = {
        arch: yaml.safe_load((ROOT / "measurement_specs" / file).read_text())
        for arch, file in ARCHITECTURES.items()
    }
    out: list[LoadedSpec] = []
    index = 0
    while len(out) < models:
        batch = 1 + index // len(VARIANTS)
        suffix, depth, dtype = VARIANTS[index % len(VARIANTS)]
        for arch, data in bases.items():
            if len(out) == models:
                break
            name = f"{arch}{suffix}-b{batch}"
            out.append(parse_spec(variant(data, name, batch, depth, dtype), f"{name}.yaml"))
        index += 1
    return out


def _unit(*parts: object) -> float:
    """Return a number in [0, 1) fixed by ``parts`` (the same in every process and run)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest) / 2**64


@dataclass(frozen=True)
class Target:
    """A configuration's cost on one kind, for generating its results."""

    config_id: int
    kind_id: int
    kind: Kind
    time_s: float
    """Its typical per-call time on the kind, in s."""
    dtype: str


def per_call_time_s(flops: int | None, nbytes: int | None, kind: Kind, jitter: float) -> float:
    """Return a per-call time: the roofline bound at 20–80 % efficiency plus a launch, in s."""
    bound = max((flops or 0) / kind.flops_per_s, (nbytes or 0) / kind.bytes_per_s)
    launch = 5e-6 if kind.type == "gpu" else 1.5e-6
    return bound / (0.2 + 0.6 * jitter) + launch


def result_row(target: Target, rng: random.Random, now: datetime, host_id: int) -> dict[str, Any]:
    """Return one stored result of ``target``: a pass on a host, eager or graph, warm or cold."""
    kind = target.kind
    gpu = kind.type == "gpu"
    graph = gpu and target.time_s < 50e-6 and rng.random() < 0.4
    cold = not graph and rng.random() < 0.08
    time_s = target.time_s * rng.lognormvariate(0, 0.05) * (1.3 if cold else 1.0)
    if graph:
        time_s = max(time_s - 3e-6, 1e-6)
    cv = abs(rng.gauss(0.02, 0.02))
    blocks = 20
    per_block = max(1, min(100_000, int(0.002 / time_s)))
    block_s = [round(time_s * per_block * (1 + rng.gauss(0, cv)), 9) for _ in range(blocks)]
    eager = not graph and not cold
    power = kind.idle_w + (kind.power_w - kind.idle_w) * (0.3 + 0.6 * rng.random())
    energy = power * time_s if eager else None
    flags = [f for f, p in (("noisy", 0.05), ("power_capped", 0.02)) if rng.random() < p]
    if cv > 0.1:
        flags.append("noisy")
    return {
        "config_id": target.config_id,
        "device_kind_id": target.kind_id,
        "host_id": host_id,
        "dtype": target.dtype,
        "timing": "graph" if graph else "eager",
        "cache_mode": "cold" if cold else "warm",
        "threads": None if gpu else 8,
        "calls_per_block": per_block,
        "blocks": blocks,
        "time_median_s": time_s,
        "time_mean_s": time_s * (1 + cv / 3),
        "time_iqr_s": time_s * cv,
        "time_cv": cv,
        "trials": 3 if eager else 0,
        "window_s": 0.5 if eager else None,
        "calls_per_window": int(0.5 / time_s) if eager else None,
        "window_time_per_call_s": time_s * (1 + rng.gauss(0, 0.01)) if eager else None,
        "host_time_per_call_s": rng.uniform(4e-6, 9e-6) if gpu else None,
        "energy_source": ("nvml" if gpu else "rapl") if eager else None,
        "energy_unavailable": None,
        "energy_per_call_j": energy,
        "dynamic_energy_per_call_j": None if energy is None else energy - kind.idle_w * time_s,
        "energy_iqr_j": None if energy is None else energy * 0.01,
        "power_mean_w": power if eager else None,
        "idle_power_w": kind.idle_w,
        "energy_disagreement": rng.uniform(0, 0.03) if eager and gpu else None,
        "flags": sorted(set(flags)),
        "raw": {"timing": {"calls_per_block": per_block, "block_s": block_s}}
        | ({"trials": [{"calls": int(0.5 / time_s), "energy_j": energy}] * 3} if eager else {}),
        "provenance": {"torch": "2.13.0", "bench_api": FILL_VERSION, "host": host_id},
        "created_at": now - timedelta(seconds=rng.uniform(0, DAYS * 86400)),
    }


def targets(store: Store) -> tuple[list[Target], dict[int, list[int]]]:
    """Return what is measured (each kind's share of the configurations) and its hosts by kind."""
    with store.transaction(read_only=True) as session:
        kinds = {k.name: queries.get_device_kind(session, k.name).id for k in KINDS}
        hosts = {
            kinds[k.name]: [h.id for h in queries.list_hosts(session, kind_id=kinds[k.name])]
            for k in KINDS
        }
        configs = session.execute(
            select(OperatorConfig.id, OperatorConfig.form, OperatorConfig.flops)
            .add_columns(OperatorConfig.bytes, OperatorConfig.dtype)
            .order_by(OperatorConfig.id)
        ).all()
    out = []
    for config_id, form, flops, nbytes, dtype in configs:
        for kind in KINDS:
            if form == "opaque" or _unit("covered", config_id, kind.name) >= kind.coverage:
                continue
            time_s = per_call_time_s(flops, nbytes, kind, _unit("eff", config_id, kind.name))
            out.append(Target(config_id, kinds[kind.name], kind, time_s, dtype or "float32"))
    return out, hosts


def _rows(
    params: FillParams, found: list[Target], hosts: dict[int, list[int]]
) -> Iterator[dict[str, Any]]:
    """Yield exactly ``params.measurements`` result rows over ``found``, unevenly."""
    rng = random.Random(params.seed)
    weights = [0.5 + rng.random() for _ in found]
    total = sum(weights)
    counts = [int(w / total * params.measurements) for w in weights]
    for i in range(params.measurements - sum(counts)):
        counts[i % len(counts)] += 1
    now = datetime.now(UTC)
    for target, count in zip(found, counts, strict=True):
        for _ in range(count):
            yield result_row(target, rng, now, rng.choice(hosts[target.kind_id]))


def _setup(store: Store, params: FillParams) -> None:
    """Ingest the specs and register the kinds, their hosts and peaks, in one transaction."""
    with store.transaction() as session:
        ingest_specs(session, generate_specs(params.models))
        for kind in KINDS:
            row = queries.get_or_create_device_kind(session, kind.name, kind.type)
            hosts = [
                queries.get_or_create_host(session, f"node{i:02d}", str(row.id), row.id)
                for i in range(HOSTS_PER_KIND)
            ]
            chip = find_chip(kind.name)
            if chip is not None and kind.type == "gpu" and kind.coverage >= 0.9:
                store_spec_peaks(session, chip, row)
            if kind.type == "cpu" or kind.name.startswith("NVIDIA H100"):
                measured = [
                    PeakFigure("float32", kind.flops_per_s * 0.7, "bench_api: matmul"),
                    PeakFigure(None, kind.bytes_per_s * 0.8, "bench_api: copy"),
                ]
                queries.replace_peaks(session, row.id, "measured", measured, host_id=hosts[0].id)


def _insert_results(store: Store, params: FillParams) -> None:
    """Bulk-insert the results and three whole-model runs per model and covering kind."""
    found, hosts = targets(store)
    chunk: list[dict[str, Any]] = []
    with store.engine.begin() as conn:
        for row in _rows(params, found, hosts):
            chunk.append(row)
            if len(chunk) == 20_000:
                conn.execute(insert(Measurement), chunk)
                chunk = []
        if chunk:
            conn.execute(insert(Measurement), chunk)
        by_pair = {(t.config_id, t.kind_id): t for t in found}
        links = conn.execute(
            select(ModelOperator.model_id, ModelOperator.config_id, ModelOperator.count)
        )
        model_time: dict[tuple[int, int], float] = {}
        for model_id, config_id, count in links:
            for kind_id in hosts:
                target = by_pair.get((config_id, kind_id))
                if target is not None:
                    key = (model_id, kind_id)
                    model_time[key] = model_time.get(key, 0.0) + count * target.time_s
        rng = random.Random(params.seed + 1)
        now = datetime.now(UTC)
        runs = []
        kinds = {t.kind_id: t.kind for t in found}
        for (model_id, kind_id), time_s in model_time.items():
            target = Target(0, kind_id, kinds[kind_id], time_s * 1.08, "float32")
            for _ in range(3):
                row = result_row(target, rng, now, rng.choice(hosts[kind_id]))
                del row["config_id"]
                row.update(model_id=model_id, hollow_time_s=time_s * 0.1)
                row["hollow_host_time_s"] = time_s * 0.05 if kinds[kind_id].type == "gpu" else None
                runs.append(row)
        if runs:
            conn.execute(insert(FullModelRun), runs)


def _fill(url: str, params: FillParams) -> None:
    engine = make_engine(url)
    try:
        upgrade(engine)
        store = Store(
            engine, make_sessionmaker(engine), url, make_sessionmaker(engine, write=False)
        )
        _setup(store, params)
        _insert_results(store, params)
        if engine.dialect.name == "postgresql":
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE"))
    finally:
        engine.dispose()


def sqlite_database(cache_dir: Path, params: FillParams, *, refill: bool) -> tuple[str, bool]:
    """Return the URL of a filled SQLite file under ``cache_dir`` and whether it was just filled."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"api-{params.key()}.sqlite"
    if path.exists() and not refill:
        return f"sqlite:///{path}", False
    part = path.with_name(path.name + ".part")
    for stale in (path, part):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{stale}{suffix}").unlink(missing_ok=True)
    _fill(f"sqlite:///{part}", params)
    with closing(sqlite3.connect(part, isolation_level=None)) as conn:
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # one complete file to rename
    part.rename(path)
    return f"sqlite:///{path}", True


def postgres_database(admin_url: str, params: FillParams, *, refill: bool) -> tuple[str, bool]:
    """Return the URL of a filled PostgreSQL database beside ``admin_url``'s; if just filled."""
    name = f"opdb_bench_api_{params.key()}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    url = make_url(admin_url)
    try:
        with admin.connect() as conn:
            exists = conn.scalar(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name})
            if exists and not refill:
                return url.set(database=name).render_as_string(hide_password=False), False
            for stale in (name, name + "_part"):
                conn.execute(text(f'DROP DATABASE IF EXISTS "{stale}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}_part"'))
        _fill(url.set(database=name + "_part").render_as_string(hide_password=False), params)
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}_part" RENAME TO "{name}"'))
    finally:
        admin.dispose()
    return url.set(database=name).render_as_string(hide_password=False), True


def drop_database(url: str, admin_url: str) -> None:
    """Remove a filled database (a SQLite file with its WAL, or a PostgreSQL database)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{parsed.database}{suffix}").unlink(missing_ok=True)
        return
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)'))
    admin.dispose()


def counts(url: str) -> dict[str, int]:
    """Return how many models, configurations, results and model runs ``url`` holds."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return {
                table: int(conn.scalar(text(f"SELECT count(*) FROM {table}")) or 0)
                for table in ("models", "operator_configs", "measurements", "full_model_runs")
            }
    finally:
        engine.dispose()


def workload(url: str) -> list[tuple[str, str]]:
    """Return the (model, device kind) pairs the clients ask for: every model on every kind."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            names = list(conn.scalars(text("SELECT name FROM models ORDER BY name")))
    finally:
        engine.dispose()
    return [(model, kind.name) for model in names for kind in KINDS]
