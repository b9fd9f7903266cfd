"""Device peaks: the shipped table's validity, lookup, roofline math, measuring and storing."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from sqlalchemy import func, select

from operator_db.db.models import DeviceKind, DevicePeak, Host
from operator_db.db.store import Store
from operator_db.devices.cpu import CpuDevice
from operator_db.devices.fake import FakeDevice
from operator_db.errors import MeasurementError, SpecError
from operator_db.measure import peaks as mp
from operator_db.measure.caches import cache_levels
from operator_db.roofline import bounds as rl
from operator_db.roofline import chips as chip_table
from operator_db.roofline import peaks as p
from operator_db.roofline import record as rec
from operator_db.roofline.bounds import CacheRoof

TABLE = chip_table.load_peak_table()
H100 = "NVIDIA H100 80GB HBM3"
GPU_LIKE = ("datacenter_gpu", "consumer_gpu", "soc", "asic")


def step_clock(step_ns: int) -> Callable[[], int]:
    """A clock that advances ``step_ns`` at every read."""
    now = [0]

    def clock() -> int:
        now[0] += step_ns
        return now[0]

    return clock


# --- the table ---------------------------------------------------------------------------------


def test_table_has_enough_chips_in_every_category() -> None:
    assert len(TABLE) >= 12
    by_category = {
        c: [chip.name for chip in TABLE if chip.category == c] for c in chip_table.CATEGORIES
    }
    assert all(by_category.values()), by_category
    assert any("TPU" in name for name in by_category["asic"])
    assert any("Apple" in name for name in by_category["soc"])
    assert any("Jetson" in name for name in by_category["soc"])


@pytest.mark.parametrize("chip", TABLE, ids=lambda c: c.name)
def test_every_chip_is_sourced_and_sane(chip: chip_table.ChipPeaks) -> None:
    assert chip.source.strip() and chip.vendor.strip()
    assert chip.aliases, "every chip needs the device-kind name it is stored under"
    assert 1e9 < chip.memory_bandwidth_bytes_per_s < 1e13
    assert chip.peak_flops_per_s
    for dtype, value in chip.peak_flops_per_s.items():
        assert 1e10 < value < 1e16, (dtype, value)
    # Every chip has a floating-point peak a roofline can use.
    assert {"float32", "bfloat16", "float16"} & set(chip.peak_flops_per_s)


@pytest.mark.parametrize("chip", [c for c in TABLE if c.category in GPU_LIKE], ids=lambda c: c.name)
def test_reduced_precision_is_not_slower_than_float32(chip: chip_table.ChipPeaks) -> None:
    f = chip.peak_flops_per_s
    fp32 = f.get("float32")
    if fp32 is not None:
        for dtype in ("tf32", "float16", "bfloat16"):
            if dtype in f:
                assert f[dtype] >= fp32, dtype
    if "float8_e4m3fn" in f and "float16" in f:
        assert f["float8_e4m3fn"] >= f["float16"]
    if "float64" in f and fp32 is not None:
        assert f["float64"] <= fp32


def test_cpu_chips_have_cpu_aliases_and_formulas() -> None:
    for chip in TABLE:
        cpu_aliases = [a.startswith("cpu:") for a in chip.aliases]
        if chip.category == "server_cpu":
            assert all(cpu_aliases), chip.name
            assert "x" in chip.notes and "GHz" in chip.notes  # cores x clock x FLOPs/cycle
            assert chip.cores is not None and f"{chip.cores} cores" in chip.notes
        else:
            assert not any(cpu_aliases), chip.name


def test_names_and_aliases_are_unique() -> None:
    names = [" ".join(n.lower().split()) for chip in TABLE for n in dict.fromkeys(chip.names)]
    assert len(names) == len(set(names))


def test_table_numbers_are_numbers_in_the_yaml() -> None:
    """67e12 would be a string in YAML 1.1; the file must hold floats (the schema is strict)."""
    raw = yaml.safe_load(chip_table.PEAK_TABLE_PATH.read_text())
    for chip in raw["chips"]:
        assert isinstance(chip["memory_bandwidth_bytes_per_s"], float)
        assert all(isinstance(v, float) for v in chip["peak_flops_per_s"].values())


def _raw_chip(**changes: Any) -> dict[str, Any]:
    chip = {
        "name": "Chip",
        "aliases": ["chip-1"],
        "category": "datacenter_gpu",
        "vendor": "V",
        "memory_bandwidth_bytes_per_s": 1.0e12,
        "peak_flops_per_s": {"float32": 1.0e13},
        "source": "datasheet",
    }
    chip.update(changes)
    return chip


@pytest.mark.parametrize(
    ("chips", "path"),
    [
        ([_raw_chip(colour="red")], "chips[0].colour"),
        ([_raw_chip(memory_bandwidth_bytes_per_s="1e12")], "chips[0].memory_bandwidth_bytes_per_s"),
        ([_raw_chip(memory_bandwidth_bytes_per_s=-1.0)], "chips[0].memory_bandwidth_bytes_per_s"),
        (
            [_raw_chip(peak_flops_per_s={"float31": 1.0e13})],
            "chips[0].peak_flops_per_s.float31.[key]",
        ),
        ([_raw_chip(peak_flops_per_s={})], "chips[0].peak_flops_per_s"),
        ([_raw_chip(category="fpga")], "chips[0].category"),
        ([_raw_chip(source="")], "chips[0].source"),
        ([_raw_chip(), _raw_chip(name="Other", aliases=["CHIP-1"])], ""),
        # A CPU needs its cores (its roof is scaled to an allotment); nothing else has them.
        ([_raw_chip(category="server_cpu")], "chips[0]"),
        ([_raw_chip(cores=8)], "chips[0]"),
        ([_raw_chip(category="server_cpu", cores=0)], "chips[0].cores"),
    ],
)
def test_invalid_tables_are_rejected(chips: list[dict[str, Any]], path: str) -> None:
    with pytest.raises(SpecError) as info:
        chip_table.parse_peak_table({"chips": chips}, "t.yaml")
    assert info.value.source == "t.yaml"
    assert info.value.path == path


def test_load_peak_table_from_a_file(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"chips": [_raw_chip()]}))
    assert [c.name for c in chip_table.load_peak_table(good)] == ["Chip"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("chips: [")
    with pytest.raises(SpecError, match="not valid YAML"):
        chip_table.load_peak_table(bad)
    with pytest.raises(SpecError, match="cannot read"):
        chip_table.load_peak_table(tmp_path / "missing.yaml")
    # The shipped table is cached; callers get their own list.
    chip_table.load_peak_table().clear()
    assert len(chip_table.load_peak_table()) == len(TABLE)


# --- lookup -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (H100, "NVIDIA H100 SXM5 80GB"),
        ("nvidia  h100 80gb hbm3", "NVIDIA H100 SXM5 80GB"),
        ("NVIDIA H100 SXM5 80GB", "NVIDIA H100 SXM5 80GB"),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe 80GB"),
        ("Tesla V100-SXM2-32GB", "NVIDIA V100 SXM2"),
        ("cpu:AMD EPYC 9654 96-Core Processor", "AMD EPYC 9654 (Genoa)"),
        # An alias inside a longer name (CPU model strings carry clocks).
        (
            "cpu:Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz",
            "Intel Xeon Platinum 8480+ (Sapphire Rapids)",
        ),
        # A part of exactly one chip's name.
        ("h100 pcie", "NVIDIA H100 PCIe 80GB"),
        ("TPU v5 lite", "Google TPU v5e"),
        # Ambiguous (H100 SXM and PCIe), too short, unknown.
        ("H100", None),
        ("NVIDIA A100 80GB PCIe", "NVIDIA A100 PCIe 80GB"),  # not NVIDIA A10
        ("NVIDIA A100 PCIe", None),  # 40GB or 80GB
        ("NVIDIA L40", None),  # not NVIDIA L4
        ("NVIDIA A10G", None),
        ("100", None),
        ("A1", None),
        ("cpu:Intel(R) Xeon(R) Processor @ 2.50GHz", None),
        ("fake:FakeGPU", None),
    ],
)
def test_find_chip(query: str, expected: str | None) -> None:
    chip = chip_table.find_chip(query)
    assert (chip.name if chip else None) == expected


@pytest.mark.parametrize(
    ("query", "chip", "how", "label"),
    [
        (H100, "NVIDIA H100 SXM5 80GB", "exact", "NVIDIA H100 SXM5 80GB"),
        ("NVIDIA H100 SXM5 80GB", "NVIDIA H100 SXM5 80GB", "exact", "NVIDIA H100 SXM5 80GB"),
        # The kind's name holds an alias and a clock: the same chip.
        (
            "cpu:Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz",
            "Intel Xeon Platinum 8480+ (Sapphire Rapids)",
            "contains",
            "Intel Xeon Platinum 8480+ (Sapphire Rapids)",
        ),
        # Only a family (this VM's "cpu:AMD EPYC"), or a short name: a match, not the chip.
        (
            "cpu:AMD EPYC",
            "AMD EPYC 9654 (Genoa)",
            "partial",
            "closest spec-sheet match: AMD EPYC 9654 (Genoa)",
        ),
        (
            "h100 pcie",
            "NVIDIA H100 PCIe 80GB",
            "partial",
            "closest spec-sheet match: NVIDIA H100 PCIe 80GB",
        ),
    ],
)
def test_match_chip_says_whether_it_is_the_chip(
    query: str, chip: str, how: str, label: str
) -> None:
    found = chip_table.match_chip(query)
    assert found is not None
    assert (found.chip.name, found.how, found.label) == (chip, how, label)
    assert found.identical == (how != "partial")
    assert chip_table.find_chip(query) == found.chip
    reference = chip_table.spec_reference(found.chip, found.how)
    assert reference.startswith(label + " | ")


def test_scaled_to_cores() -> None:
    assert chip_table.scaled_to_cores(7.3728e12, 96, 2) == pytest.approx(153.6e9)
    assert chip_table.scaled_to_cores(460.8e9, 96, 1.5) == pytest.approx(7.2e9)
    assert chip_table.scaled_to_cores(1.0, 96, 192) == 2.0  # two sockets
    for usable, chip in ((0, 96), (2, 0), (-1, 96)):
        with pytest.raises(ValueError, match="core counts"):
            chip_table.scaled_to_cores(1.0, chip, usable)


def test_cpu_spec_roof_is_scaled_to_the_allotment_and_labelled() -> None:
    kind = p.spec_peaks_for("cpu:AMD EPYC 9654 96-Core Processor", usable_cores=2)
    assert kind is not None
    assert (kind.spec_match, kind.chip_cores, kind.usable_cores) == ("exact", 96, 2)
    assert kind.spec_scale == pytest.approx(2 / 96)
    flops = kind.flops_per_s("float32", prefer="spec")
    bw = kind.bytes_per_s(prefer="spec")
    # 2 cores x 3.7 GHz (two busy cores of 96 may boost) x 32 FLOPs/cycle
    assert flops is not None and flops.value == pytest.approx(236.8e9)
    # A few cores draw far more than 2/96 of the channels: the socket's bandwidth is the bound.
    assert bw is not None and bw.value == pytest.approx(460.8e9) and kind.spec_bytes_scale == 1.0
    assert kind.spec_flops_per_s["float32"] == 7.3728e12  # the chip's figure is kept
    label = (
        "AMD EPYC 9654 (Genoa) spec, scaled to 2 of 96 cores at the boost clock, the socket's "
        "bandwidth"
    )
    assert kind.spec_label == label
    roof = p.peaks_of(kind, "float32", "spec")
    assert roof is not None
    assert (roof.flops_per_s, roof.bytes_per_s) == (flops.value, bw.value)
    assert roof.source == f"{label}: float32 peak and bandwidth"
    row = next(r for r in kind.rows() if r["dtype"] == "float32")
    assert row["spec"] == pytest.approx(236.8e9) and row["spec_chip"] == 7.3728e12
    # Every core of the socket: the base clock, the chip's own figure.
    whole = p.spec_peaks_for("cpu:AMD EPYC 9654 96-Core Processor", usable_cores=96)
    assert (
        whole is not None
        and whole.spec_label == "AMD EPYC 9654 (Genoa) spec, scaled to 96 of 96 cores"
    )
    whole_flops = whole.flops_per_s("float32", prefer="spec")
    assert whole_flops is not None and whole_flops.value == pytest.approx(7.3728e12)
    # Two sockets' cores: twice the socket's FLOP/s (base clock) and twice its bandwidth.
    two = p.spec_peaks_for("cpu:AMD EPYC 9654 96-Core Processor", usable_cores=192)
    assert two is not None and two.spec_bytes_scale == 2.0
    two_bw = two.bytes_per_s(prefer="spec")
    assert two_bw is not None and two_bw.value == pytest.approx(921.6e9)
    # A family name is the closest match; no allotment: the whole chip, and it says so.
    family = p.spec_peaks_for("cpu:AMD EPYC")
    assert family is not None and family.spec_scale == 1.0
    assert family.spec_label == (
        "closest spec-sheet match: AMD EPYC 9654 (Genoa), whole chip (96 cores; no allotment "
        "recorded)"
    )
    # GPUs have no cores to scale by, whatever a caller passes.
    gpu = p.spec_peaks_for(H100, usable_cores=2)
    assert gpu is not None and gpu.spec_scale == 1.0 and gpu.usable_cores is None
    assert gpu.spec_label == "NVIDIA H100 SXM5 80GB spec"


def test_spec_peaks_for_uses_the_table() -> None:
    peaks = p.spec_peaks_for(H100)
    assert peaks is not None
    assert peaks.spec_origin == "table"
    assert peaks.spec_flops_per_s["bfloat16"] == 989.5e12
    assert peaks.spec_bytes_per_s == 3.35e12
    assert peaks.spec_reference is not None and "datasheet" in peaks.spec_reference
    assert p.spec_peaks_for("fake:FakeGPU") is None


# --- roofline -----------------------------------------------------------------------------------


def test_roofline_hand_computed() -> None:
    # 1 GFLOP over 10 MB on 100 TFLOP/s and 1 TB/s: 10 us of compute, 10 us of memory.
    assert rl.roofline_time_s(1e9, 1e7, 100e12, 1e12) == pytest.approx(1e-5)
    # A 4096^3 fp16 GEMM (3 x 32 MiB) on an H100 SXM: compute-bound.
    flops, nbytes = 2 * 4096**3, 3 * 4096 * 4096 * 2
    assert rl.arithmetic_intensity(flops, nbytes) == pytest.approx(4096 / 3 * 2 / 2)
    assert rl.ridge_point(989.5e12, 3.35e12) == pytest.approx(295.37, rel=1e-4)
    assert rl.bound_type(flops, nbytes, 989.5e12, 3.35e12) == "compute"
    assert rl.roofline_time_s(flops, nbytes, 989.5e12, 3.35e12) == pytest.approx(flops / 989.5e12)
    # A ReLU on 1M float32: 1e6 FLOPs, 8 MB: memory-bound, 8e6 / 3.35e12 s.
    assert rl.bound_type(1e6, 8e6, 989.5e12, 3.35e12) == "memory"
    assert rl.roofline_time_s(1e6, 8e6, 989.5e12, 3.35e12) == pytest.approx(8e6 / 3.35e12)
    # Ties count as memory-bound; a view moves and computes nothing.
    assert rl.bound_type(2.0, 1.0, 2.0, 1.0) == "memory"
    assert rl.roofline_time_s(0, 0, 1e12, 1e12) == 0.0
    assert rl.arithmetic_intensity(0, 0) == 0.0
    assert rl.arithmetic_intensity(5, 0) == math.inf
    assert rl.arithmetic_intensity(6, 3) == 2.0


@pytest.mark.parametrize(
    "call",
    [
        lambda: rl.roofline_time_s(-1, 0, 1, 1),
        lambda: rl.roofline_time_s(1, 1, 0, 1),
        lambda: rl.roofline_time_s(1, 1, 1, -1),
        lambda: rl.arithmetic_intensity(1, -1),
        lambda: rl.ridge_point(0, 1),
        lambda: rl.bound_type(1, 1, 1, 0),
    ],
)
def test_roofline_rejects_bad_inputs(call: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        call()


def test_dtype_fallbacks() -> None:
    assert p.dtype_candidates("float32") == ("float32",)
    assert p.dtype_candidates("torch.float32", allow_tf32=True) == ("tf32", "float32")
    assert p.dtype_candidates("tf32") == ("tf32", "float32")
    assert p.dtype_candidates("float8_e5m2") == ("float8_e5m2", "float8_e4m3fn")
    assert p.dtype_candidates("bfloat16") == ("bfloat16",)

    v100 = p.spec_peaks_for("Tesla V100-SXM2-16GB")
    assert v100 is not None
    assert v100.flops_per_s("bfloat16") is None  # no bf16 Tensor Cores: no float16 stand-in
    tf32 = v100.flops_per_s("float32", allow_tf32=True)
    assert tf32 == p.Peak(15.7e12, "spec", "float32", v100.spec_reference)

    kind = p.KindPeaks(
        "k",
        spec_flops_per_s={"float32": 50.0e12, "tf32": 400.0e12, "float8_e4m3fn": 1.0e15},
        spec_bytes_per_s=3.0e12,
        spec_reference="sheet",
        spec_origin="table",
        measured_flops_per_s={"float32": 40.0e12},
        measured_bytes_per_s=2.5e12,
        measured_references={"float32": "mm", p.BANDWIDTH: "copy"},
    )
    assert kind.flops_per_s("float32") == p.Peak(40.0e12, "measured", "float32", "mm")
    assert kind.flops_per_s("float32", prefer="spec") == p.Peak(50.0e12, "spec", "float32", "sheet")
    # The dtype decides before the source: TF32 math is not bounded by a measured FP32 matmul.
    assert kind.flops_per_s("float32", allow_tf32=True) == p.Peak(400.0e12, "spec", "tf32", "sheet")
    assert kind.flops_per_s("float8_e5m2") == p.Peak(1.0e15, "spec", "float8_e4m3fn", "sheet")
    assert kind.flops_per_s("int8") is None
    assert kind.bytes_per_s() == p.Peak(2.5e12, "measured", None, "copy")
    assert kind.bytes_per_s(prefer="spec") == p.Peak(3.0e12, "spec", None, "sheet")
    assert p.KindPeaks("nothing").empty and not kind.empty
    rows = kind.rows()
    assert [r["dtype"] for r in rows] == ["float32", "tf32", "float8_e4m3fn", None]
    assert rows[0]["fraction_of_spec"] == pytest.approx(0.8)
    assert rows[1]["measured"] is None and rows[1]["fraction_of_spec"] is None
    assert rows[3]["quantity"] == "bytes_per_s"


# --- measuring ----------------------------------------------------------------------------------


@pytest.fixture
def cpu(tmp_path: Path) -> Iterator[CpuDevice]:
    """The CPU under a fake model name, on one thread (tiny matmuls on busy cores crawl)."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("vendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\n")
    threads = torch.get_num_threads()
    with CpuDevice(threads=1, cpuinfo=cpuinfo, powercap_root=tmp_path / "no-powercap") as device:
        yield device
    torch.set_num_threads(threads)


def test_measure_peaks_on_the_cpu(cpu: CpuDevice) -> None:
    n, nbytes = 64, 1 << 16
    measured = mp.measure_peaks(
        cpu,
        dtypes=("float32", "bfloat16", "tf32"),
        matmul_n=n,
        copy_bytes=nbytes,
        min_time_s=0.01,
        repeats=3,
    )
    assert measured.kind_name == "cpu:AMD EPYC 9654 96-Core Processor"
    assert measured.device_type == "cpu"
    assert set(measured.matmul) == {"float32", "bfloat16"}
    assert set(measured.skipped) == {"tf32"}
    for dtype, timing in measured.matmul.items():
        assert (timing.kernel, timing.dtype, timing.size) == ("matmul", dtype, n)
        assert timing.work_per_call == 2 * n**3
        assert timing.calls_per_block >= 1 and len(timing.block_s) == 3
        assert all(b > 0 for b in timing.block_s)
        assert 0 < timing.median_per_s <= timing.best_per_s
    assert measured.copy is not None
    # The faster of a copy (2 x its buffer moved per call) and an in-place add_ (3 x).
    moved = {"copy": 2 * nbytes, "add_": 3 * nbytes}
    assert measured.copy.kernel in moved and measured.copy.size == nbytes
    assert measured.copy.work_per_call == moved[measured.copy.kernel]
    assert measured.bytes_per_s == measured.copy.best_per_s > 0
    assert measured.flops_per_s.keys() == measured.matmul.keys()
    assert measured.provenance["timer"] == "host_clock"
    levels = {c.level: c for c in measured.caches}  # L2 and L3 where sysfs tells them
    assert set(levels) == {f"L{c.level}" for c in cache_levels() if c.level >= 2}
    for cache in measured.caches:  # the fastest of the buffer sizes tried
        tried = {cache.capacity_bytes // (mp.CACHE_FILL << k) for k in range(mp.CACHE_SIZES)}
        assert cache.timing.size in tried
        assert cache.timing.best_per_s > 0
    data = measured.as_dict()
    assert [c["level"] for c in data["caches"]] == list(levels)
    assert data["matmul"]["float32"]["work_per_call"] == 2 * n**3
    assert data["skipped"]["tf32"].startswith("tf32 is a CUDA")


def test_measure_peaks_with_a_manual_clock_is_exact() -> None:
    """Each block reads the clock twice: with a 1 ms step every block lasts exactly 1 ms."""
    n, nbytes = 16, 4096
    with FakeDevice() as fake:
        measured = mp.measure_peaks(
            fake,
            dtypes=("float32",),
            matmul_n=n,
            copy_bytes=nbytes,
            min_time_s=0.01,
            repeats=5,
            clock=step_clock(1_000_000),
        )
    # Warm-up: batches of 1, 2, 4 calls (1 ms each) pass 2.5 ms; last per-call time 0.25 ms,
    # so a 2 ms block (10 ms / 5) holds 8 calls.
    mm = measured.matmul["float32"]
    assert (mm.calls_per_block, mm.block_s) == (8, (1e-3,) * 5)
    assert mm.best_per_s == mm.median_per_s == pytest.approx(2 * n**3 * 8 / 1e-3)
    assert measured.copy is not None
    # Same clock for both kernels: the add_, which counts 3 x its buffer a call, is the faster.
    assert measured.copy.kernel == "add_"
    assert measured.copy.best_per_s == pytest.approx(3 * nbytes * 8 / 1e-3)
    assert measured.device_type == "fake" and measured.kind_name == "fake:FakeGPU"
    assert "median" in mm.describe() and "n=16" in mm.describe()


def test_one_pair_of_copy_buffers_is_alive_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy's buffers are freed before the add's are made: on a VM whose sysfs L3 is the
    socket's 480 MiB, two pairs of 4 x 480 MiB held 8.2 GB at once (4.2 GB now)."""
    import weakref

    alive: list[weakref.ref[torch.Tensor]] = []
    made = mp._buffers

    def one_pair(*args: Any) -> tuple[torch.Tensor, torch.Tensor]:
        assert not any(ref() is not None for ref in alive), "a pair made before the last died"
        pair = made(*args)
        alive[:] = [weakref.ref(t) for t in pair]
        return pair

    monkeypatch.setattr(mp, "_buffers", one_pair)
    with FakeDevice() as fake:
        measured = mp.measure_peaks(fake, dtypes=(), copy_bytes=1 << 16, min_time_s=0.01)
    assert measured.copy is not None and len(alive) == 2


def test_measure_peaks_skips_what_would_take_too_long() -> None:
    with FakeDevice() as fake:
        measured = mp.measure_peaks(
            fake,
            dtypes=("float32", "float16"),
            matmul_n=64,
            copy_bytes=1024,
            min_time_s=0.01,
            max_call_s=1e-4,
            clock=step_clock(1_000_000),
        )
    assert measured.matmul == {}
    assert set(measured.skipped) == {"float32", "float16"}
    assert "too slow" in measured.skipped["float16"] and "n=64" in measured.skipped["float16"]
    assert measured.copy is not None


def test_measure_peaks_refuses_a_stopped_clock() -> None:
    with FakeDevice() as fake, pytest.raises(MeasurementError, match="no measurable time"):
        mp.measure_peaks(fake, dtypes=(), copy_bytes=16, min_time_s=0.01, clock=lambda: 7)


@pytest.mark.parametrize(
    "kwargs",
    [{"dtypes": ("int4",)}, {"matmul_n": 0}, {"copy_bytes": 0}, {"min_time_s": 0}, {"repeats": 0}],
)
def test_measure_peaks_rejects_bad_arguments(kwargs: dict[str, Any]) -> None:
    with FakeDevice() as fake, pytest.raises(ValueError):
        mp.measure_peaks(fake, **kwargs)


# --- storing and reading ------------------------------------------------------------------------


def fake_measured(kind_name: str, scale: float = 1.0, *, copy: bool = True) -> mp.MeasuredPeaks:
    """Measured peaks with known rates: 1 call per 1 s block, so the rate is the work."""

    def mm(dtype: str, flops: float) -> mp.KernelTiming:
        return mp.KernelTiming("matmul", dtype, 1024, int(flops * scale), 1, (1.0, 2.0))

    return mp.MeasuredPeaks(
        kind_name=kind_name,
        device_type="gpu",
        matmul={"float32": mm("float32", 5.0e13), "bfloat16": mm("bfloat16", 6.0e14)},
        copy=mp.KernelTiming("copy", None, 1 << 30, int(3.0e12 * scale), 1, (1.0,))
        if copy
        else None,
    )


def peak_rows(store: Store, source: str | None = None) -> list[tuple[str, str | None, Any, Any]]:
    with store.transaction(read_only=True) as session:
        query = select(
            DevicePeak.source, DevicePeak.dtype, DevicePeak.flops_per_s, DevicePeak.bytes_per_s
        )
        if source is not None:
            query = query.where(DevicePeak.source == source)
        return [tuple(r) for r in session.execute(query.order_by(DevicePeak.id))]  # type: ignore[misc]


def test_store_spec_peaks_replaces_the_kinds_spec_rows(store: Store) -> None:
    chip = chip_table.find_chip(H100)
    assert chip is not None
    with store.transaction() as session:
        stored = rec.store_spec_peaks(session, chip, H100)
        assert len(stored) == len(chip.peak_flops_per_s) + 1 == 8
    with store.transaction() as session:  # again: replaced, not added
        kind = session.scalars(select(DeviceKind).where(DeviceKind.name == H100)).one()
        assert kind.type == "gpu"
        rec.store_spec_peaks(session, chip, kind)
    table = peak_rows(store)
    assert len(table) == 8
    assert ("spec", "bfloat16", 989.5e12, None) in table
    assert ("spec", None, None, 3.35e12) in table
    with store.transaction(read_only=True) as session:
        assert session.scalar(select(func.count()).select_from(DeviceKind)) == 1
        peaks = p.peaks_for_kind(session, H100)
    assert peaks.spec_origin == "db"
    assert peaks.spec_flops_per_s == chip.peak_flops_per_s
    assert peaks.spec_bytes_per_s == 3.35e12
    assert peaks.spec_reference == chip_table.spec_reference(chip)
    assert peaks.measured_flops_per_s == {} and peaks.measured_bytes_per_s is None


def test_store_measured_peaks_per_host(store: Store) -> None:
    kind_name = "fake:Peaky"
    with store.transaction() as session:
        rows = rec.store_measured_peaks(session, kind_name, fake_measured(kind_name))
        assert len(rows) == 3
        kind = session.scalars(select(DeviceKind).where(DeviceKind.name == kind_name)).one()
        assert kind.type == "gpu"  # the measured device's type, not a guess from the name
        host = Host(hostname="h1", device_id="gpu-0", device_kind_id=kind.id)
        session.add(host)
        session.flush()
        host_id = host.id
    assert peak_rows(store) == [
        ("measured", "float32", 5.0e13, None),
        ("measured", "bfloat16", 6.0e14, None),
        ("measured", None, None, 3.0e12),
    ]
    with store.transaction() as session:
        # Same host (none) again: replaced. Another host: added, and its better figures win.
        rec.store_measured_peaks(session, kind_name, fake_measured(kind_name, 0.5))
        rec.store_measured_peaks(
            session, kind_name, fake_measured(kind_name, 2.0, copy=False), host_id=host_id
        )
    assert len(peak_rows(store)) == 5
    with store.transaction(read_only=True) as session:
        peaks = p.peaks_for_kind(session, kind_name)
    assert peaks.measured_flops_per_s == {"float32": 1.0e14, "bfloat16": 1.2e15}
    assert peaks.measured_bytes_per_s == 1.5e12  # only the host-less run measured bandwidth
    assert peaks.measured_references["float32"].startswith("matmul float32 n=1024")
    assert peaks.measured_references[p.BANDWIDTH].startswith("copy_ of")
    assert peaks.spec_origin is None and peaks.spec_flops_per_s == {}
    flops = peaks.flops_per_s("float32")
    assert flops is not None and (flops.value, flops.source) == (1.0e14, "measured")


def test_peaks_for_kind_falls_back_to_the_table(store: Store) -> None:
    with store.transaction() as session:
        empty = p.peaks_for_kind(session, "fake:Unknown")
        from_table = p.peaks_for_kind(session, "Tesla T4")
    assert empty.empty and empty.kind_name == "fake:Unknown"
    assert from_table.spec_origin == "table"
    assert from_table.spec_flops_per_s["float16"] == 65.0e12
    assert peak_rows(store) == []  # reading stores nothing


def cpu_measured(hostname: str, usable_cores: float, scale: float = 1.0) -> mp.MeasuredPeaks:
    """CPU peaks measured on ``hostname`` by a process allotted ``usable_cores``."""
    return mp.MeasuredPeaks(
        kind_name="cpu:AMD EPYC",
        device_type="cpu",
        matmul={
            "float32": mp.KernelTiming("matmul", "float32", 2048, int(1.2e11 * scale), 1, (1.0,))
        },
        copy=mp.KernelTiming("copy", None, 1 << 28, int(2.0e10 * scale), 1, (1.0,)),
        provenance={
            "host": hostname,
            "device": {"device_id": "cpu"},
            "cpu_allotment": {"usable_cores": usable_cores, "limited_by": "affinity"},
        },
    )


def test_cpu_roof_is_scaled_to_the_measuring_hosts_allotment(store: Store) -> None:
    with store.transaction() as session:
        peaks = rec.record_peaks(session, cpu_measured("vm-2", 2))
        host = session.scalars(select(Host).where(Host.hostname == "vm-2")).one()
        assert host.info["cpu_allotment"]["usable_cores"] == 2
        kind = session.scalars(select(DeviceKind).where(DeviceKind.name == "cpu:AMD EPYC")).one()
        assert kind.info["spec_chip"] == {
            "name": "AMD EPYC 9654 (Genoa)",
            "match": "partial",
            "cores": 96,
        }
    assert peaks.spec_origin == "db"
    assert peaks.spec_label == (
        "closest spec-sheet match: AMD EPYC 9654 (Genoa), scaled to 2 of 96 cores at the boost "
        "clock, the socket's bandwidth"
    )
    assert peaks.spec_reference is not None
    assert peaks.spec_reference.startswith("closest spec-sheet match: AMD EPYC 9654 (Genoa) | ")
    spec = p.peaks_of(peaks, "float32", "spec")
    measured = p.peaks_of(peaks, "float32", "measured")
    assert spec is not None and measured is not None
    assert spec.flops_per_s == pytest.approx(236.8e9) and spec.bytes_per_s == 460.8e9
    assert (measured.flops_per_s, measured.bytes_per_s) == (1.2e11, 2.0e10)
    row = next(r for r in peaks.rows() if r["dtype"] == "float32")
    assert row["fraction_of_spec"] == pytest.approx(1.2e11 / 236.8e9)  # 51%, not 1.6%
    # The measured rows are the host's: a second host keeps its own, and the roof is scaled to
    # the largest allotment (like the measured peaks, the best of the kind).
    with store.transaction() as session:
        rec.record_peaks(session, cpu_measured("vm-8", 8, scale=3.0))
        rec.record_peaks(session, cpu_measured("vm-2", 2))  # again: replaced, not added
    assert len(peak_rows(store, "measured")) == 4
    with store.transaction(read_only=True) as session:
        peaks = p.peaks_for_kind(session, "cpu:AMD EPYC")
    assert peaks.usable_cores_seen == (2.0, 8.0) and peaks.usable_cores == 8.0
    spec = p.peaks_of(peaks, "float32", "spec")
    assert spec is not None and spec.flops_per_s == pytest.approx(7.3728e12 * 8 / 96 * 3.7 / 2.4)


def test_spec_rows_stored_before_the_chip_was_recorded_are_still_scaled(store: Store) -> None:
    chip = chip_table.find_chip("cpu:AMD EPYC 9654 96-Core Processor")
    assert chip is not None
    with store.transaction() as session:
        rec.store_spec_peaks(session, chip, "cpu:AMD EPYC 9654 96-Core Processor")
        kind = session.scalars(select(DeviceKind)).one()
        kind.info = {}  # as an older version stored them
        session.add(Host(hostname="h", device_id="cpu", device_kind_id=kind.id))
        session.flush()
        session.scalars(select(Host)).one().info = {"cpu_allotment": {"usable_cores": 4}}
    with store.transaction(read_only=True) as session:
        peaks = p.peaks_for_kind(session, "cpu:AMD EPYC 9654 96-Core Processor")
    assert (peaks.spec_chip, peaks.spec_match, peaks.usable_cores) == (
        "AMD EPYC 9654 (Genoa)",
        "exact",
        4.0,
    )
    assert peaks.spec_label == (
        "AMD EPYC 9654 (Genoa) spec, scaled to 4 of 96 cores at the boost clock, the socket's "
        "bandwidth"
    )


def test_record_peaks_stores_measured_and_spec_once(store: Store) -> None:
    measured = fake_measured(H100)
    with store.transaction() as session:
        peaks = rec.record_peaks(session, measured)
    assert len(peak_rows(store, "measured")) == 3
    assert len(peak_rows(store, "spec")) == 8
    assert peaks.spec_origin == "db"
    assert peaks.measured_flops_per_s == {"float32": 5.0e13, "bfloat16": 6.0e14}
    bf16 = peaks.flops_per_s("bfloat16", prefer="spec")
    assert bf16 is not None and (bf16.value, bf16.source) == (989.5e12, "spec")
    # A stored spec is not overwritten by a later run; an unknown chip gets no spec rows.
    changed = copy.deepcopy(measured)
    with store.transaction() as session:
        rec.record_peaks(session, changed)
        rec.record_peaks(session, fake_measured("fake:Other"))
    assert len(peak_rows(store, "spec")) == 8
    assert len(peak_rows(store, "measured")) == 6


def test_the_cpu_copy_is_larger_than_the_last_level_cache() -> None:
    assert mp.cpu_copy_bytes(None) == 256 << 20  # unreadable: the default
    assert mp.cpu_copy_bytes(32 << 20) == 256 << 20  # this VM's 32 MiB L3: the default is 8x it
    assert mp.cpu_copy_bytes(1152 << 20) == 4 * (1152 << 20)  # a 1.1 GiB L3 (Genoa-X): 4x it


def cpu_measured_with_caches(hostname: str, l2: float, l3: float) -> mp.MeasuredPeaks:
    """``cpu_measured`` with an L2 (2 MiB) and an L3 (32 MiB) copy at ``l2``, ``l3`` B/s."""

    def copy(level: str, capacity: int, rate: float) -> mp.CacheCopy:
        timing = mp.KernelTiming("copy", None, capacity // 4, int(rate), 1, (1.0,))
        return mp.CacheCopy(level, capacity, timing)

    base = cpu_measured(hostname, 2)
    return replace(base, caches=(copy("L2", 2 << 20, l2), copy("L3", 32 << 20, l3)))


def test_cache_roofs_are_stored_read_back_and_make_the_measured_roof(store: Store) -> None:
    with store.transaction() as session:
        rec.record_peaks(session, cpu_measured_with_caches("vm-a", 1.0e11, 1.5e11))
        rec.record_peaks(session, cpu_measured_with_caches("vm-b", 1.2e11, 1.4e11))  # best of each
    with store.transaction(read_only=True) as session:
        kind = p.peaks_for_kind(session, "cpu:AMD EPYC")
    assert kind.measured_caches == (
        CacheRoof("L2", 2 << 20, 1.2e11),
        CacheRoof("L3", 32 << 20, 1.5e11),
    )
    assert kind.measured_bytes_per_s == 2.0e10  # memory's stays apart
    measured = p.peaks_of(kind, "float32", "measured")
    assert measured is not None and measured.caches == kind.measured_caches
    assert measured.source == "measured: float32 peak and bandwidth, L2 and L3 roofs"
    spec = p.peaks_of(kind, "float32", "spec")
    assert spec is not None and spec.caches == ()  # no spec sheet gives a cache's bandwidth
    best = p.best_peaks(kind, "float32")
    assert best is not None and best.caches == kind.measured_caches
    rows = [r for r in kind.rows() if r["level"] is not None]
    assert [(r["level"], r["capacity_bytes"], r["measured"], r["spec"]) for r in rows] == [
        ("L2", 2 << 20, 1.2e11, None),
        ("L3", 32 << 20, 1.5e11, None),
    ]


def test_cache_levels_from_sysfs(tmp_path: Path) -> None:
    def index(cpu: int, k: int, level: int, kind: str, size: str, shared: str) -> None:
        folder = tmp_path / f"cpu{cpu}" / "cache" / f"index{k}"
        folder.mkdir(parents=True)
        for name, value in {"level": level, "type": kind, "size": size}.items():
            (folder / name).write_text(f"{value}\n")
        (folder / "shared_cpu_list").write_text(f"{shared}\n")

    for cpu in (0, 1):
        index(cpu, 0, 1, "Data", "32K", str(cpu))
        index(cpu, 1, 1, "Instruction", "32K", str(cpu))
        index(cpu, 2, 2, "Unified", "1024K", str(cpu))
        index(cpu, 3, 3, "Unified", "32768K", "0-1")
    found = cache_levels([0, 1], sysfs=str(tmp_path))
    assert [(c.level, c.capacity_bytes, c.instances) for c in found] == [
        (1, 64 << 10, 2),
        (2, 2 << 20, 2),
        (3, 32 << 20, 1),  # shared by both: once
    ]
    assert [c.capacity_bytes for c in cache_levels([1], sysfs=str(tmp_path))] == [
        32 << 10,
        1 << 20,
        32 << 20,
    ]
    assert cache_levels([0], sysfs=str(tmp_path / "nothing")) == []


def test_cache_roofs_serve_the_first_bytes_and_memory_the_rest() -> None:
    l2 = CacheRoof("L2", 2e6, 200e9)
    l3 = CacheRoof("L3", 30e6, 100e9)
    slow = CacheRoof("L1", 64e3, 10e9)  # below memory's rate: never used
    roof = rl.Peaks(1e11, 20e9, "measured", caches=(l3, slow, l2))
    assert roof.memory_time_s(1e6) == pytest.approx(1e6 / 200e9)  # all in the L2
    # A level holding C bytes serves up to 2C of traffic (each line read and written back):
    # 4 MB from the L2, 60 MB from the L3, the last 16 MB from memory.
    assert rl.TRAFFIC_PER_BYTE_HELD == 2
    assert roof.memory_time_s(80e6) == pytest.approx(4e6 / 200e9 + 60e6 / 100e9 + 16e6 / 20e9)
    assert roof.memory_time_s(None) == 0.0
    assert roof.bound_s(1e6, 80e6) == roof.memory_time_s(80e6)  # 10 µs of FLOPs, 1.4 ms of bytes
    assert roof.bound_s(1e9, 1e6) == pytest.approx(1e9 / 1e11)
    assert roof.bound_type(1e9, 1e6) == "compute" and roof.bound_type(1e6, 40e6) == "memory"
    plain = rl.Peaks(1e11, 20e9, "measured")
    assert plain.bound_s(1e6, 40e6) == rl.roofline_time_s(1e6, 40e6, 1e11, 20e9)
    assert roof.bound_s(1e6, 40e6) < plain.bound_s(1e6, 40e6)  # a floor under the plain one
    assert roof.as_dict()["caches"][0] == {
        "level": "L3",
        "capacity_bytes": 30e6,
        "bytes_per_s": 100e9,
        "source": "measured copy",  # how the level's rate was found (an attained one says so)
    }
    assert plain.as_dict() == {
        "flops_per_s": 1e11,
        "bytes_per_s": 20e9,
        "source": "measured",
        "caches": [],
    }
    with pytest.raises(ValueError):
        roof.memory_time_s(-1)
