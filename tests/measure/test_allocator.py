"""Retaining freed memory: fresh output buffers stop costing page faults (run in subprocesses)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import resource, sys, torch
from torch import nn
from operator_db.measure.allocator import allocator_state, retain_freed_memory
if sys.argv[1] == "retain":
    retain_freed_memory()
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.Conv2d(32, 96, 1), nn.BatchNorm2d(96), nn.ReLU6(),
                      nn.Conv2d(96, 96, 3, padding=1, groups=96), nn.BatchNorm2d(96),
                      nn.Conv2d(96, 24, 1), nn.BatchNorm2d(24)).eval()
x = torch.randn(1, 3, 112, 112)
with torch.no_grad():
    for _ in range(3):
        model(x)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        model(x)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 20, allocator_state())
"""


def faults(mode: str) -> tuple[int, str]:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True
    ).stdout.split(maxsplit=1)
    return int(out[0]), out[1].strip()


def test_retained_memory_removes_page_faults() -> None:
    default_faults, default_state = faults("default")
    retained_faults, retained_state = faults("retain")
    assert default_state.startswith("default; huge pages")
    assert retained_state.startswith("glibc: freed memory retained")
    # A small MobileNet-like block at 112x112: thousands of faults per forward by default.
    # Retained: none, or a few from per-thread heaps; at least ten times fewer in any case.
    assert default_faults > 1000
    assert retained_faults * 10 < default_faults


HUGE = """
import torch
from operator_db.measure.allocator import huge_pages_state
blocks = [torch.ones(2**20) for _ in range(32)]  # 128 MiB on the heap, every page touched
rollup = open("/proc/self/smaps_rollup").read()
print(int(rollup.split("AnonHugePages:")[1].split()[0]), huge_pages_state())
"""


def huge_pages(env: dict[str, str]) -> tuple[int, str]:
    out = subprocess.run(
        [sys.executable, "-c", HUGE], capture_output=True, text=True, check=True, env=env
    ).stdout.split(maxsplit=1)
    return int(out[0]), out[1].strip()


def test_a_measuring_process_start_puts_the_heap_on_huge_pages() -> None:
    """With ``process_start_env``'s environment glibc madvises its heap for THP (and says so)."""
    import os

    from operator_db.cli.process_env import process_start_env

    plain = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    plain.pop("OPDB_MEASURE__HUGE_PAGES", None)
    before_kib, before = huge_pages(plain)
    after_kib, after = huge_pages(process_start_env(plain))
    assert before.startswith("huge pages not asked") and after.startswith("huge pages asked")
    mode = after.split("THP ", 1)[1].rstrip(")")
    if mode == "madvise":  # nothing asked, nothing given; asked, most of the 128 MiB
        assert before_kib == 0 and after_kib >= 64 * 1024
    elif mode == "always":
        assert after_kib >= 64 * 1024
    else:  # "never": the kernel gives none, asked or not
        assert after_kib == 0
