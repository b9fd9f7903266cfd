"""A GPU's attained L2 roof, which roof explains each point, and the imported GPUs on the plots.

The kinds here are the NeuSight data set's (NVML names, registered as ``opdb import`` registers
them); their configurations are stored by hand with the FLOPs, compulsory bytes and per-call
times of the case at hand.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from operator_db.datasets.importer import ensure_kind
from operator_db.datasets.records import KindInfo
from operator_db.db import queries
from operator_db.db.models import OperatorConfig, utcnow
from operator_db.db.store import Store
from operator_db.roofline import attained
from operator_db.roofline.attained import with_attained
from operator_db.roofline.bounds import CacheRoof, Peaks
from operator_db.roofline.chip_plot import device_roofs, plot_chip_rooflines
from operator_db.roofline.chips import chip_spec
from operator_db.roofline.configs import kind_configs_roofline
from operator_db.roofline.explain import count_classes, roof_class
from operator_db.roofline.peaks import best_peaks, peaks_for_kind, peaks_of
from operator_db.roofline.record import store_attained_roofs
from tests.helpers import run_cli
from tests.report.test_report import png_ok

L4 = "NVIDIA L4"  # 48 MiB of L2, 300 GB/s, 30.3 TFLOP/s float32
T4 = "Tesla T4"  # 4 MiB of L2, 320 GB/s
MIB = 1 << 20
NEUSIGHT_GPUS = (
    "Tesla P4",
    "Tesla P100-PCIE-16GB",
    "Tesla V100-PCIE-32GB",
    "Tesla T4",
    "NVIDIA A100-PCIE-40GB",
    "NVIDIA A100 80GB PCIe",
    "NVIDIA A100-SXM4-40GB",
    "NVIDIA L4",
)


def imported_kinds(store: Store, names: tuple[str, ...] = NEUSIGHT_GPUS) -> None:
    """Register ``names`` as an import of a data set named ``neusight`` does."""
    with store.transaction() as session:
        queries.get_or_update_data_source(session, "neusight", {"title": "NeuSight"})
        for name in names:
            ensure_kind(
                session, KindInfo(name, "NVIDIA", info={"config": {"Device": name}}), "neusight"
            )


def add_result(
    store: Store, kind: str, op: str, flops: float, nbytes: float, time_s: float
) -> None:
    """Store one configuration (``op``, FLOPs, compulsory bytes) with one result on ``kind``."""
    key = hashlib.sha256(f"{op} {flops} {nbytes}".encode()).hexdigest()
    with store.transaction() as session:
        kind_id = queries.get_device_kind(session, kind).id
        config = OperatorConfig(
            key=key,
            op=op,
            form="function",
            mode="inference",
            dtype="float32",
            flops=int(flops),
            bytes=int(nbytes),
        )
        session.add(config)
        session.flush()
        queries.add_results(
            session,
            "measurements",
            [
                {
                    "config_id": config.id,
                    "device_kind_id": kind_id,
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
                    "flags": [],
                    "raw": {},
                    "provenance": {},
                    "created_at": utcnow(),
                }
            ],
        )
        store_attained_roofs(session, queries.get_device_kind(session, kind))  # as imports do


def test_the_l2_roof_is_the_fastest_l2_resident_configuration(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    imported_kinds(store, (L4,))
    # Memory-bound (1 FLOP per 8 bytes): 40 MiB at 400 GB/s and 48 MiB at 572 GB/s fit in the
    # 48 MiB L2; 100 MiB at 600 GB/s does not, so it sets nothing (and is above every roof).
    add_result(store, L4, "torch.add", 5 * MIB, 40 * MIB, 40 * MIB / 400e9)
    add_result(store, L4, "torch.nn.Softmax", 6 * MIB, 48 * MIB, 48 * MIB / 572e9)
    add_result(store, L4, "torch.mul", 12.5 * MIB, 100 * MIB, 100 * MIB / 600e9)
    add_result(store, L4, "torch.relu", 1 * MIB, 8 * MIB, 8 * MIB / 100e9)  # slow: below DRAM
    # Faster still, 1 GB/s, but at 200 TFLOP/s: above the 30.3 TFLOP/s compute roof, its work is
    # miscounted (a Winograd convolution's), so it sets no memory roof either.
    add_result(store, L4, "torch.nn.Conv2d", 1e10, 48 * MIB, 50e-6)
    with store.transaction(read_only=True) as session:
        known = peaks_for_kind(session, L4)
    (l2,) = known.attained_caches
    chip = chip_spec(L4)
    assert chip is not None and l2.capacity_bytes == chip.l2_cache_bytes == 48 * MIB
    assert (l2.level, l2.configs, l2.op) == ("L2", 4, "torch.nn.Softmax")
    assert l2.bytes_per_s == pytest.approx(572e9)
    assert l2.derivation == (
        "attained: fastest of 4 L2-resident configurations (Softmax, 48 MiB in 88 µs); "
        "no spec figure"
    )
    assert l2.describe(300e9).startswith("L2 roof 572 GB/s, 1.91× the DRAM roof (holds 48 MiB;")
    # The kind's spec roof carries it (faster than its 300 GB/s), labelled as attained.
    spec = peaks_of(known, "float32", "spec")
    assert spec is not None and spec.bytes_per_s == 300e9
    assert spec.caches == (CacheRoof("L2", 48 * MIB, l2.bytes_per_s, l2.derivation),)
    assert spec.source == "NVIDIA L4 spec: float32 peak and bandwidth, L2 roof attained"
    assert best_peaks(known, "float32") == spec
    monkeypatch.setattr(attained, "PAGE", 1)  # read a result at a time: the same roof
    with store.transaction() as session:
        kind = queries.get_device_kind(session, L4)
        assert store_attained_roofs(session, kind) == known.attained_caches
        assert peaks_for_kind(session, L4).attained_caches == known.attained_caches
    # No roof where it is no faster than the DRAM roof.
    assert with_attained(Peaks(1e13, 600e9, "faster memory"), known.attained_caches).caches == ()
    assert l2.describe(600e9).startswith("no L2 roof: the fastest of 4 L2-resident")


def test_a_point_above_dram_within_the_l2_is_explained_by_it() -> None:
    l2 = CacheRoof("L2", 48 * MIB, 572e9, "attained")
    roof = Peaks(30.3e12, 300e9, "spec", caches=(l2,))
    flops, nbytes = 6 * MIB, 30 * MIB  # 30 MiB at 450 GB/s: 1.5× the DRAM roof
    time_s = nbytes / 450e9
    assert roof_class(flops, nbytes, time_s, Peaks(30.3e12, 300e9)) == "unexplained"
    assert roof_class(flops, nbytes, time_s, roof) == "cache"
    assert roof_class(flops, nbytes, nbytes / 250e9, roof) == "memory"  # below DRAM: DRAM's
    assert roof_class(1e12, nbytes, 1e12 / 20e12, roof) == "compute"
    # Bytes beyond what the L2 can serve come at DRAM's rate: 200 MiB at 450 GB/s is above.
    assert roof_class(flops, 200 * MIB, 200 * MIB / 450e9, roof) == "unexplained"
    assert roof_class(flops, nbytes, 0.0, roof) is None  # no time, no class


def test_a_point_above_every_roof_is_counted_unexplained() -> None:
    roof = Peaks(8.1e12, 320e9, "spec")
    # A Winograd 3×3 convolution: the direct convolution's FLOPs in half the time they need.
    flops, nbytes = 8.1e10, 4e7
    time_s = flops / 8.1e12 / 2.25
    classes = [
        roof_class(flops, nbytes, time_s, roof),
        roof_class(flops, nbytes, flops / 8.1e12 * 1.5, roof),
        roof_class(1e6, 3.2e8, 1e-3, roof),
    ]
    assert classes == ["unexplained", "compute", "memory"]
    counts = count_classes(classes, [2.25, 1 / 1.5, 1.0])
    assert (counts.memory, counts.cache, counts.compute, counts.unexplained) == (1, 0, 1, 1)
    assert counts.most_above == pytest.approx(2.25)
    assert counts.describe(roof) == (
        "1 DRAM-bound, 0 cache-explained, 1 compute-bound, 0 algorithm-explained, "
        "1 unexplained (up to 2.25× above every roof)"
    )


def test_a_kinds_configurations_on_its_roofs(store: Store, tmp_path: Path) -> None:
    imported_kinds(store, (L4,))
    add_result(store, L4, "torch.add", 5 * MIB, 40 * MIB, 40 * MIB / 200e9)  # DRAM-bound
    add_result(store, L4, "torch.nn.Softmax", 6 * MIB, 48 * MIB, 48 * MIB / 572e9)  # sets L2
    add_result(store, L4, "torch.mul", 4 * MIB, 30 * MIB, 30 * MIB / 450e9)  # L2-explained
    add_result(store, L4, "torch.bmm", 3e10, 30 * MIB, 3e10 / 20e12)  # compute-bound
    add_result(store, L4, "torch.nn.Conv2d", 3e10, 30 * MIB, 3e10 / 60e12)  # 1.98× the peak
    with store.transaction(read_only=True) as session:
        view = kind_configs_roofline(session, L4)
    by_op = view.table.set_index("op")["roof"].to_dict()
    assert by_op == {
        "torch.add": "memory",
        "torch.nn.Softmax": "cache",  # on its own roof: 1.91× the DRAM roof
        "torch.mul": "cache",
        "torch.bmm": "compute",
        "torch.nn.Conv2d": "unexplained",
    }
    assert view.counts.describe(view.reference) == (
        "1 DRAM-bound, 2 L2-explained, 1 compute-bound, 0 algorithm-explained, "
        "1 unexplained (up to 1.98× above every roof)"
    )
    plain = view.above_plain()
    assert (plain.above_dram, plain.above_dram_in_l2, plain.above_compute) == (2, 2, 1)
    assert plain.dram_most == pytest.approx(572 / 300)
    assert plain.describe() == (
        "above the DRAM roof: 2 (up to 1.91×; 2 fit in the 48 MiB L2); "
        "above the compute roof: 1 (up to 1.98×; 1 fit in the 48 MiB L2)"
    )
    assert dict(view.unexplained_ops()) == {"torch.nn.Conv2d": 1}
    assert png_ok(view.plot(tmp_path / "l4.png"))


def test_roofline_command_draws_a_kinds_configurations(
    store: Store, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    imported_kinds(store, (L4,))
    add_result(store, L4, "torch.nn.Softmax", 6 * MIB, 48 * MIB, 48 * MIB / 572e9)
    add_result(store, L4, "torch.add", 5 * MIB, 40 * MIB, 40 * MIB / 200e9)
    out = tmp_path / "l4.png"
    done = run_cli(capsys, "roofline", "--device-kind", L4, "-o", str(out), "--db", db_url)
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0].startswith(f"wrote {out}: 2 configurations on {L4} (float32 roofs:")
    assert (
        "by roof: 1 DRAM-bound, 1 L2-explained, 0 compute-bound, 0 algorithm-explained, "
        "0 unexplained"
    ) in lines
    assert any(line.startswith("L2 roof 572 GB/s, 1.91× the DRAM roof") for line in lines)
    assert png_ok(out)
    bare = run_cli(capsys, "roofline", "--db", db_url)
    assert bare.code != 0 and "--device-kind" in bare.err


def test_the_chips_plot_draws_every_imported_gpu(
    store: Store, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    imported_kinds(store)
    add_result(store, L4, "torch.nn.Softmax", 6 * MIB, 48 * MIB, 48 * MIB / 572e9)
    add_result(store, T4, "torch.tanh", 1 * MIB, 4 * MIB, 4 * MIB / 167e9)  # below its DRAM
    with store.transaction(read_only=True) as session:
        devices = device_roofs(session)
    assert sorted(d.kind_name for d in devices) == sorted(NEUSIGHT_GPUS)
    by_name = {d.kind_name: d for d in devices}
    assert all(d.spec is not None and d.measured is None for d in devices)
    l4 = by_name[L4].spec
    assert l4 is not None and [c.level for c in l4.caches] == ["L2"]
    t4 = by_name[T4]
    assert t4.spec is not None and t4.spec.caches == ()  # its fastest is below 320 GB/s
    assert t4.attained_lines()[0].startswith("no L2 roof: the fastest of 1 L2-resident")
    path = plot_chip_rooflines(tmp_path / "chips.svg", devices=devices)
    svg = path.read_text()
    for name in NEUSIGHT_GPUS:
        assert f"{name}: " in svg, name
    assert "NVIDIA L4: L2 roof, 572 GB/s (attained: fastest of 1 L2-resident" in svg
    out = tmp_path / "chips.png"
    done = run_cli(capsys, "chips", "-o", str(out), "--db", db_url)
    assert done.code == 0, done.err
    assert done.out.splitlines()[0] == f"wrote {out}: 26 chips, 8 device kinds"
    assert png_ok(out)


def test_an_l2_roof_under_a_dram_roof_of_the_figure_is_not_drawn() -> None:
    """Finding: an "attained L2" roof listed below the DRAM bandwidth."""
    from operator_db.roofline.figure import above_dram

    l2 = CacheRoof("L2", 40 * 2**20, 1.8e12, "attained")
    measured = Peaks(1e13, 1.5e12, "measured", caches=(l2,))  # above the measured DRAM roof
    spec = Peaks(1.2e13, 2.0e12, "spec sheet")  # below the spec sheet's
    assert not above_dram(l2, [spec, measured])
    assert above_dram(l2, [measured])
    assert above_dram(CacheRoof("L2", 40 * 2**20, 3e12, "attained"), [spec, measured])
