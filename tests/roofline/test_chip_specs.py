"""GPU spec-sheet facts of the shipped table: SMs, FP32 lanes, clocks, memory, L2, compute
capability, board power, memory type; ``chip_spec``."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from operator_db.errors import SpecError
from operator_db.roofline import chips as chip_table

TABLE = chip_table.load_peak_table()
GIB, MIB = float(2**30), float(2**20)
NVIDIA_DATACENTER = [c for c in TABLE if c.vendor == "NVIDIA" and c.category == "datacenter_gpu"]
WITH_CLOCK = [c for c in TABLE if c.fp32_from_clock is not None]
NVIDIA_GPUS = [c for c in TABLE if c.vendor == "NVIDIA" and c.category != "server_cpu"]
WITH_POWER_OR_MEMORY = [c for c in TABLE if c.board_power_w or c.memory_type]

NEUSIGHT_DEVICES = {
    # The NVML names the NeuSight data set's rows and configs carry, and the chip of each.
    "Tesla P4": "NVIDIA P4",
    "Tesla P100-PCIE-16GB": "NVIDIA P100 PCIe 16GB",
    "Tesla V100-PCIE-32GB": "NVIDIA V100 PCIe 32GB",
    "Tesla T4": "NVIDIA T4",
    "NVIDIA A100-PCIE-40GB": "NVIDIA A100 PCIe 40GB",
    "NVIDIA A100 80GB PCIe": "NVIDIA A100 PCIe 80GB",
    "NVIDIA L4": "NVIDIA L4",
    "NVIDIA A100-SXM4-40GB": "NVIDIA A100 SXM4 40GB",
    "NVIDIA H100 80GB HBM3": "NVIDIA H100 SXM5 80GB",
    "NVIDIA H200": "NVIDIA H200 SXM 141GB",
}
NEUSIGHT_CONFIGS = Path(__file__).resolve().parents[3] / "shared/data/neusight/data/device_configs"


@pytest.mark.parametrize(("device", "chip"), NEUSIGHT_DEVICES.items())
def test_every_neusight_device_is_an_alias_of_its_chip(device: str, chip: str) -> None:
    found = chip_table.match_chip(device)
    assert found is not None and found.how == "exact" and found.chip.name == chip
    assert device in found.chip.aliases
    assert chip_table.chip_spec(device) == found.chip


def test_chip_spec_is_only_the_named_chip() -> None:
    # A family or part of a name is another chip's figures: find_chip takes it, chip_spec not.
    assert chip_table.find_chip("h100 pcie") is not None
    assert chip_table.chip_spec("h100 pcie") is None
    assert chip_table.chip_spec("NVIDIA A100 PCIe") is None  # 40GB or 80GB
    assert chip_table.chip_spec("fake:FakeGPU") is None
    # An alias with more after it (a CPU's clock suffix) is the chip.
    xeon = chip_table.chip_spec("cpu:Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz")
    assert xeon is not None and xeon.cores == 56
    assert chip_table.chip_spec("NVIDIA L4", TABLE[:1]) is None  # a table of one CPU


@pytest.mark.parametrize("chip", NVIDIA_DATACENTER, ids=lambda c: c.name)
def test_every_nvidia_datacenter_gpu_has_its_facts(chip: chip_table.ChipPeaks) -> None:
    assert chip.fp32_from_clock is not None and chip.l2_cache_bytes is not None
    if chip.memory_bytes is None:
        # One entry for boards of two capacities (its aliases): its notes must say so.
        assert "memory_bytes is left out" in chip.notes
    assert "float32" in chip.peak_flops_per_s
    # What the cross-device predictor needs besides.
    assert chip.compute_capability is not None
    assert chip.board_power_w is not None and chip.memory_type is not None


@pytest.mark.parametrize("chip", NVIDIA_GPUS, ids=lambda c: c.name)
def test_every_nvidia_gpu_has_a_compute_capability_with_its_source(
    chip: chip_table.ChipPeaks,
) -> None:
    assert chip.compute_capability is not None
    assert re.fullmatch(r"[5-9]\.\d", chip.compute_capability), chip.compute_capability
    assert "NVIDIA CUDA GPUs list (compute capability)" in chip.source


def test_compute_capability_is_only_on_nvidia_gpus() -> None:
    others = [c for c in TABLE if c not in NVIDIA_GPUS]
    assert others and all(c.compute_capability is None for c in others)


@pytest.mark.parametrize("chip", WITH_POWER_OR_MEMORY, ids=lambda c: c.name)
def test_power_and_memory_type_agree_with_source_and_notes(chip: chip_table.ChipPeaks) -> None:
    text = f"{chip.source} {chip.notes}"
    # The board power is a figure the entry prints (its notes or its source's column).
    assert chip.board_power_w is not None and 10 <= chip.board_power_w <= 1000
    assert f"{chip.board_power_w:g} W" in text, (chip.name, chip.board_power_w)
    # The memory type is the family of the one the source or notes name (HBM2e: HBM).
    assert chip.memory_type is not None
    named = set(re.findall(r"\b(HBM|GDDR|LPDDR)\d", text))
    assert named == {chip.memory_type}, (chip.name, named)


@pytest.mark.parametrize("chip", WITH_CLOCK, ids=lambda c: c.name)
def test_fp32_peak_is_sms_times_lanes_times_two_times_the_clock(chip: chip_table.ChipPeaks) -> None:
    derived = chip.fp32_from_clock
    assert derived is not None
    assert derived == pytest.approx(chip.peak_flops_per_s["float32"], rel=0.02)
    assert chip.sms is not None and chip.cores_per_sm is not None
    # The notes show the derivation: the lanes (SMs x cores per SM) and the clock in GHz.
    assert f"{chip.sms * chip.cores_per_sm}" in chip.notes, chip.notes
    assert f"{chip.boost_clock_mhz / 1000:g} GHz" in chip.notes or (
        f"{chip.boost_clock_mhz} MHz" in chip.notes
    )


def test_the_corrected_neusight_configs() -> None:
    l4 = chip_table.chip_spec("NVIDIA L4")
    p4 = chip_table.chip_spec("Tesla P4")
    assert l4 is not None and (l4.sms, l4.cores_per_sm, l4.boost_clock_mhz) == (58, 128, 2040)
    assert l4.l2_cache_bytes == 48 * MIB and l4.memory_bandwidth_bytes_per_s == 300.0e9
    assert p4 is not None and (p4.sms, p4.cores_per_sm) == (20, 128)
    p100 = chip_table.chip_spec("Tesla P100-PCIE-16GB")
    assert p100 is not None and p100.boost_clock_mhz == 1303
    for chip in (l4, p4, p100):
        assert "NeuSight config" in chip.notes and "wrong" in chip.notes


@pytest.mark.parametrize("chip", NVIDIA_DATACENTER, ids=lambda c: c.name)
def test_units_are_sane(chip: chip_table.ChipPeaks) -> None:
    assert chip.sms is not None and 10 <= chip.sms <= 200
    assert chip.cores_per_sm in (64, 128)
    assert chip.boost_clock_mhz is not None and 500 <= chip.boost_clock_mhz <= 2600
    if chip.base_clock_mhz is not None:
        assert 500 <= chip.base_clock_mhz < chip.boost_clock_mhz
    # Binary units, as the table's header says: whole MiB of L2, whole GiB of memory.
    assert chip.l2_cache_bytes is not None and MIB <= chip.l2_cache_bytes <= 100 * MIB
    assert (chip.l2_cache_bytes / MIB).is_integer()
    if chip.memory_bytes is not None:
        assert 4 * GIB <= chip.memory_bytes <= 256 * GIB
        assert (chip.memory_bytes / GIB).is_integer()
        # The capacity in the chip's name, where it has one, is the GiB stored.
        gb = [w[:-2] for w in chip.name.split() if w.endswith("GB") and w[:-2].isdigit()]
        assert gb in ([], [f"{chip.memory_bytes / GIB:.0f}"]), chip.name


def test_the_facts_are_typed_in_the_yaml() -> None:
    """Byte counts are floats written 80.0e+9 (as every figure), counts and clocks integers."""
    raw = yaml.safe_load(chip_table.PEAK_TABLE_PATH.read_text())
    for chip in raw["chips"]:
        for key in ("memory_bytes", "l2_cache_bytes"):
            assert isinstance(chip.get(key, 0.0), float), (chip["name"], key)
        for key in ("sms", "cores_per_sm", "boost_clock_mhz", "base_clock_mhz"):
            assert isinstance(chip.get(key, 0), int), (chip["name"], key)
        assert isinstance(chip.get("board_power_w", 0.0), float), chip["name"]
        # Quoted: an unquoted 8.0 is a float, and 7.10 would be read as 7.1.
        assert isinstance(chip.get("compute_capability", ""), str), chip["name"]


def _neusight_configs() -> list[dict[str, Any]]:
    if not NEUSIGHT_CONFIGS.is_dir():
        return []
    return [json.loads(gzip.open(p).read()) for p in sorted(NEUSIGHT_CONFIGS.glob("*.json.gz"))]


@pytest.mark.skipif(not _neusight_configs(), reason="the NeuSight data set is not at ../shared")
def test_neusight_configs_agree_or_the_notes_say_which_is_right() -> None:
    for config in _neusight_configs():
        chip = chip_table.chip_spec(config["Device"])
        assert chip is not None, config["Device"]
        assert chip.memory_bytes is not None and chip.l2_cache_bytes is not None
        ours = {
            "Num_Sm": chip.sms,
            "Core_Per_SM": chip.cores_per_sm,
            "Freq": chip.boost_clock_mhz,
            "Mem_Bw": chip.memory_bandwidth_bytes_per_s / 1e9,
            "L2Cache": chip.l2_cache_bytes / MIB,
            "Dev_Mem": chip.memory_bytes / GIB,
        }
        differ = [k for k, v in ours.items() if v != pytest.approx(config[k], rel=1e-3)]
        fp32 = chip.peak_flops_per_s["float32"] / 1e9
        if config["SingleFLOPs"] != pytest.approx(fp32, rel=0.01):
            differ.append("SingleFLOPs")
        if differ:
            # Each difference is named in the notes, with the config it is in.
            assert "NeuSight config" in chip.notes, (chip.name, differ)
            for key in differ:
                assert key in chip.notes, (chip.name, key)


def _gpu(**changes: Any) -> dict[str, Any]:
    chip = {
        "name": "GPU",
        "aliases": ["gpu-1"],
        "category": "datacenter_gpu",
        "vendor": "V",
        "memory_bandwidth_bytes_per_s": 1.0e12,
        "peak_flops_per_s": {"float32": 19.5e12},
        "source": "datasheet",
        "sms": 108,
        "cores_per_sm": 64,
        "boost_clock_mhz": 1410,
    }
    chip.update(changes)
    return chip


@pytest.mark.parametrize(
    ("chip", "path", "message"),
    [
        (_gpu(boost_clock_mhz=1500), "chips[0]", "float32 peak"),  # 20.7 against 19.5: 6 % off
        (_gpu(base_clock_mhz=1500), "chips[0]", "base_clock_mhz"),
        (_gpu(boost_clock_mhz=None, base_clock_mhz=765), "chips[0]", "base_clock_mhz"),
        (_gpu(sms=0), "chips[0].sms", None),
        (_gpu(memory_bytes="16e9"), "chips[0].memory_bytes", None),  # YAML 1.1 reads a string
        (_gpu(l2_cache_bytes=-1.0), "chips[0].l2_cache_bytes", None),
        (_gpu(category="server_cpu", cores=8), "chips[0]", "for GPUs"),
        (_gpu(vendor="NVIDIA", compute_capability="8"), "chips[0].compute_capability", None),
        (_gpu(vendor="NVIDIA", compute_capability="sm_80"), "chips[0].compute_capability", None),
        (_gpu(vendor="NVIDIA", compute_capability="8.0\n"), "chips[0].compute_capability", None),
        (_gpu(vendor="NVIDIA", compute_capability=8.0), "chips[0].compute_capability", None),
        (_gpu(compute_capability="9.4"), "chips[0]", "NVIDIA GPUs only"),  # an AMD-like GPU
        (
            _gpu(
                category="server_cpu",
                vendor="NVIDIA",
                sms=None,
                cores_per_sm=None,
                cores=72,
                boost_clock_mhz=None,
                compute_capability="9.0",
            ),
            "chips[0]",
            "NVIDIA GPUs only",
        ),
        (_gpu(board_power_w=0.0), "chips[0].board_power_w", None),
        (_gpu(board_power_w="700"), "chips[0].board_power_w", None),
        (_gpu(memory_type="HBM3"), "chips[0].memory_type", None),
    ],
)
def test_invalid_gpu_facts_are_rejected(
    chip: dict[str, Any], path: str, message: str | None
) -> None:
    with pytest.raises(SpecError, match=message) as info:
        chip_table.parse_peak_table({"chips": [chip]}, "t.yaml")
    assert info.value.path == path


def test_valid_gpu_facts_are_kept() -> None:
    [chip] = chip_table.parse_peak_table(
        {"chips": [_gpu(base_clock_mhz=765, memory_bytes=40 * GIB, l2_cache_bytes=40 * MIB)]},
        "t.yaml",
    )
    assert chip.fp32_from_clock == pytest.approx(19.492e12, rel=1e-4)
    assert (chip.base_clock_mhz, chip.memory_bytes) == (765, 40 * GIB)
    # Without the clock there is nothing to check against.
    [bare] = chip_table.parse_peak_table({"chips": [_gpu(boost_clock_mhz=None)]}, "t.yaml")
    assert bare.fp32_from_clock is None
    assert (bare.compute_capability, bare.board_power_w, bare.memory_type) == (None, None, None)


def test_compute_capability_power_and_memory_type_are_kept() -> None:
    nvidia = _gpu(vendor="NVIDIA", compute_capability="8.0", board_power_w=400.0)
    [chip] = chip_table.parse_peak_table({"chips": [nvidia | {"memory_type": "HBM"}]}, "t.yaml")
    assert (chip.compute_capability, chip.board_power_w, chip.memory_type) == ("8.0", 400.0, "HBM")
    [two_digits] = chip_table.parse_peak_table(
        {"chips": [_gpu(vendor="NVIDIA", compute_capability="10.0")]}, "t.yaml"
    )
    assert two_digits.compute_capability == "10.0"
    # Power and memory type are not NVIDIA's only: another vendor's GPU, a CPU's DDR.
    [other] = chip_table.parse_peak_table(
        {"chips": [_gpu(board_power_w=750.0, memory_type="HBM")]}, "t.yaml"
    )
    assert (other.compute_capability, other.memory_type) == (None, "HBM")
    cpu = _gpu(category="server_cpu", sms=None, cores_per_sm=None, boost_clock_mhz=None, cores=8)
    [xeon] = chip_table.parse_peak_table(
        {"chips": [cpu | {"memory_type": "DDR", "board_power_w": 350.0}]}, "t.yaml"
    )
    assert xeon.memory_type == "DDR"
