"""bench_api's databases, cached: the generated one (200 models, 1,000,000 results), NeuSight's.

Models are the shipped architectures (ResNet-50, MobileNetV2, BERT-base, two MLPs) at batch sizes
1, 2, 3, ..., each as it is, as a deeper sibling that runs the same configurations more often (like
ResNet-50 and ResNet-101 share theirs) and in bfloat16: ingested through the project's own
validation and ingest.
Results are then bulk-inserted (the fill is setup, not what is measured): on eight device kinds,
each covering part of the configurations, several results per configuration and kind (passes,
hosts, eager and CUDA-graph timing, warm and cold caches), with times from a roofline-like model
of the kind, energies from its power, raw samples and provenance of a realistic size.

The NeuSight database (``NeuSightParams``) is the public NeuSight data set imported as
``opdb import`` does (~280,000 results of eight NVIDIA GPUs), with models made of its
configurations (each a random draw of those measured on five kinds or more, counts 1-48) and,
on each kind where a model's every configuration has a figure, one whole-model run imported from
a data source named ``bench`` (Σ count x figure x 1.0-1.2: synthetic, and said so).

A filled database is kept under a name made of its parameters (and the schema's revision), so a
second run with the same ones starts at once; it is filled under a temporary name and renamed
when complete, so an interrupted fill is never taken for a finished one.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import create_engine, distinct, func, insert, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

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

    @property
    def prefix(self) -> str:
        """How the cached database's name starts."""
        return "api"


NEUSIGHT_FILL_VERSION = 2
"""Bump when the NeuSight fill changes (2: through ``opdb import``, whole models included)."""
NEUSIGHT_MIN_KINDS = 5
"""A NeuSight model's configurations are drawn from those with figures on this many kinds."""
MIX_PREFIX = "neusight-mix-"
"""The names of the models the NeuSight fill makes of the data set's configurations."""
BENCH_SOURCE = "bench"
"""The data source of the NeuSight database's synthetic whole-model runs."""


@dataclass(frozen=True)
class NeuSightParams:
    """A NeuSight database: the data set at ``path`` imported, and ``models`` models of its own."""

    path: str
    models: int
    seed: int = 0

    def key(self) -> str:
        """Return a short hash of the parameters, the fill's version and the schema's head."""
        body = json.dumps(
            [
                str(Path(self.path).resolve()),
                self.models,
                self.seed,
                NEUSIGHT_FILL_VERSION,
                head_revision(),
            ]
        )
        return hashlib.sha256(body.encode()).hexdigest()[:10]

    @property
    def prefix(self) -> str:
        """How the cached database's name starts."""
        return "neusight"


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


def stored_targets(store: Store) -> list[Target]:
    """Return every models' configuration with a figure on a kind, at that figure (any database).

    What the writer writes where the database is not this fill's (NeuSight's, one given by URL).
    """
    out = []
    with store.transaction(read_only=True) as session:
        kinds = {k.id: k for k in queries.device_kinds(session)}
        ids = sorted({c.id for m in queries.list_models(session) for c in _costs(session, m.id)})
        for (config_id, kind_id, _), figure in queries.config_figures(
            session, ids, list(kinds), timing="eager"
        ).items():
            kind = kinds[kind_id]
            spec = Kind(kind.name, kind.type, 10e12, 1e12, 300, 50, 1.0)
            out.append(Target(config_id, kind_id, spec, figure.time_median_s, "float32"))
    return out


def _costs(session: Session, model_id: int) -> list[queries.ConfigCost]:
    return queries.model_config_costs(session, model_id)


def targets(store: Store) -> tuple[list[Target], dict[int, list[int]]]:
    """Return what is measured (each kind's share of the configurations) and its hosts by kind.

    A database that is not this fill's (without its kinds): :func:`stored_targets`, no hosts.
    """
    with store.transaction(read_only=True) as session:
        ours = all(queries.find_device_kind(session, k.name) is not None for k in KINDS)
    if not ours:
        found = stored_targets(store)
        return found, {t.kind_id: [] for t in found}
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


def neusight_specs(session: Session, params: NeuSightParams) -> list[LoadedSpec]:
    """Return ``params.models`` specs of NeuSight's configurations (those on 5 kinds or more).

    Each model draws 10-240 configurations (log-uniformly many), each run 1-48 times; the
    configurations are the stored ones, unchanged (same keys: the figures are theirs).
    """
    rng = random.Random(params.seed)
    candidates = sorted(
        session.scalars(
            select(Measurement.config_id)
            .group_by(Measurement.config_id)
            .having(func.count(distinct(Measurement.device_kind_id)) >= NEUSIGHT_MIN_KINDS)
        )
    )
    out = []
    for n in range(params.models):
        size = min(len(candidates), round(10 * 24 ** rng.random()))
        configs = queries.configs_by_ids(session, rng.sample(candidates, size))
        operators = [
            {
                **queries.config_spec(c).model_dump(mode="json", exclude_none=True),
                "count": rng.randint(1, 48),
                "flops": c.flops,
                "flops_backward": c.flops_backward,
                "flop_rule": c.flop_rule,
                "bytes": c.bytes,
                "params": c.params,
            }
            for c in configs
        ]
        name = f"{MIX_PREFIX}{n:03d}"
        spec = {
            "spec_version": SPEC_VERSION,
            "model": {"name": name, "description": f"{name}: bench's model of NeuSight's figures"},
            "operators": [{k: v for k, v in op.items() if v is not None} for op in operators],
        }
        loaded = parse_spec(spec, f"{name}.yaml")
        assert list(loaded.keys) == [c.key for c in configs], "a configuration's key changed"
        out.append(loaded)
    return out


def _neusight_runs(session: Session, rng: random.Random) -> list[dict[str, Any]]:
    """Return a synthetic whole-model run per mix model and kind where every figure is known."""
    kinds = [k.id for k in queries.device_kinds(session)]
    now = datetime.now(UTC)
    runs = []
    for model in queries.list_models(session):
        if not model.name.startswith(MIX_PREFIX):  # the data set's own models: their own runs
            continue
        links = queries.model_config_costs(session, model.id)
        figures = queries.config_figures(session, [c.id for c in links], kinds, timing="eager")
        for kind_id in kinds:
            known = [figures.get((c.id, kind_id, "eager")) for c in links]
            if not links or any(f is None for f in known):
                continue
            total = sum(c.count * f.time_median_s for c, f in zip(links, known, strict=True) if f)
            time_s = total * rng.uniform(1.0, 1.2)
            runs.append(
                {
                    "model_id": model.id,
                    "device_kind_id": kind_id,
                    "source_ref": f"{model.name}@{kind_id}",
                    "dtype": "float32",
                    "timing": "eager",
                    "cache_mode": "warm",
                    "calls_per_block": 1,
                    "blocks": 1,
                    "time_median_s": time_s,
                    "time_mean_s": time_s,
                    "time_iqr_s": 0.0,
                    "time_cv": 0.0,
                    "trials": 0,
                    "energy_unavailable": "synthetic",
                    "flags": [],
                    "raw": {},
                    "provenance": {"source": BENCH_SOURCE, "synthetic": True},
                    "created_at": now,
                }
            )
    return runs


def _import_neusight(url: str, path: str) -> None:
    """Run ``opdb import PATH --db URL``, printing its last lines.

    Whatever the importer of this code imports: the per-operator results, and the whole models
    with their runs where it reads them.

    Raises:
        RuntimeError: the import failed (its output's tail).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPDB_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["COLUMNS"] = "200"
    done = subprocess.run(
        [sys.executable, "-m", "operator_db", "import", path, "--db", url],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"opdb import failed:\n{(done.stdout + done.stderr)[-3000:]}")
    print("\n".join(done.stdout.splitlines()[-6:]), file=sys.stderr)


def _fill_neusight(store: Store, params: NeuSightParams) -> None:
    """Import the data set (``opdb import``), ingest the models, add their synthetic runs."""
    _import_neusight(store.url, params.path)
    with store.transaction() as session:
        ingest_specs(session, neusight_specs(session, params))
    with store.transaction() as session:
        source = queries.get_or_update_data_source(
            session,
            BENCH_SOURCE,
            {
                "title": "bench_api: synthetic whole-model runs (Σ count x figure x 1.0-1.2)",
                "method": "not measured: made up by bench/api_fill.py for the benchmark",
            },
        )
        runs = _neusight_runs(session, random.Random(params.seed + 1))
        rows = [r | {"source_id": source.id} for r in runs]
        queries.add_results(session, "full_model_runs", rows)


def _fill(url: str, params: FillParams | NeuSightParams) -> None:
    engine = make_engine(url)
    try:
        upgrade(engine)
        store = Store(
            engine, make_sessionmaker(engine), url, make_sessionmaker(engine, write=False)
        )
        if isinstance(params, NeuSightParams):
            _fill_neusight(store, params)
        else:
            _setup(store, params)
            _insert_results(store, params)
        if engine.dialect.name == "postgresql":
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE"))
    finally:
        engine.dispose()


def sqlite_database(
    cache_dir: Path, params: FillParams | NeuSightParams, *, refill: bool
) -> tuple[str, bool]:
    """Return the URL of a filled SQLite file under ``cache_dir`` and whether it was just filled."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{params.prefix}-{params.key()}.sqlite"
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


def postgres_database(
    admin_url: str, params: FillParams | NeuSightParams, *, refill: bool
) -> tuple[str, bool]:
    """Return the URL of a filled PostgreSQL database beside ``admin_url``'s; if just filled."""
    name = f"opdb_bench_{params.prefix}_{params.key()}"
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
    """Return the (model, device kind) pairs the clients ask for.

    This fill's database: every model on every kind; another (NeuSight's, one given by URL):
    each model on each kind with a figure of it or of one of its configurations.
    """
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            names = list(conn.scalars(text("SELECT name FROM models ORDER BY name")))
            kinds = set(conn.scalars(text("SELECT name FROM device_kinds")))
            if kinds >= {k.name for k in KINDS}:
                return [(model, kind.name) for model in names for kind in KINDS]
            rows = conn.execute(
                text(
                    "SELECT DISTINCT m.name, k.name FROM models m "
                    "JOIN model_operators o ON o.model_id = m.id "
                    "CROSS JOIN device_kinds k WHERE EXISTS (SELECT 1 FROM measurements r "
                    "WHERE r.device_kind_id = k.id AND r.config_id = o.config_id) "
                    "ORDER BY m.name, k.name"
                )
            )
            return [(model, kind) for model, kind in rows]
    finally:
        engine.dispose()
