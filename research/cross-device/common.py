"""Shared loading, spec and metric helpers for the cross-GPU latency study.

HELD-OUT RULE: only the five training GPUs' latency rows are ever kept. The test CSVs also hold
rows of NVIDIA L4 and NVIDIA A100 80GB PCIe; they are dropped inside the reader (pandas reads the
file in chunks and keeps only rows whose Device is a training GPU) and an assertion checks it.
Nothing here prints, counts or evaluates a held-out row. The conv family is never read (its
A100 data were collected on the held-out A100 80GB PCIe).
"""
from __future__ import annotations

import math
import os
import re

import numpy as np
import pandas as pd
import yaml

ROOT = "/work/shared/data/neusight/data/dataset"
PEAKS = "/work/main/operator_db/roofline/peaks.yaml"
CACHE = "/tmp/xdev/cache"

TRAIN_DEVS = [
    "Tesla P4",
    "Tesla P100-PCIE-16GB",
    "Tesla V100-PCIE-32GB",
    "Tesla T4",
    "NVIDIA A100-PCIE-40GB",
]
HELD_OUT = ["NVIDIA L4", "NVIDIA A100 80GB PCIe"]  # spec sheets only
SHORT = {
    "Tesla P4": "P4",
    "Tesla P100-PCIE-16GB": "P100",
    "Tesla V100-PCIE-32GB": "V100",
    "Tesla T4": "T4",
    "NVIDIA A100-PCIE-40GB": "A100-40",
    "NVIDIA L4": "L4",
    "NVIDIA A100 80GB PCIe": "A100-80",
}
EW_OPS = ["add", "addu", "mul", "mulu", "pow", "powu", "div", "divu", "relu", "gelu", "tanh"]
FAMILIES = ["bmm", "linear", "ew", "ln", "softmax"]
# micro-architecture generation (spec-sheet fact: the chip's architecture)
ARCH = {"Tesla P4": 6.1, "Tesla P100-PCIE-16GB": 6.0, "Tesla V100-PCIE-32GB": 7.0,
        "Tesla T4": 7.5, "NVIDIA A100-PCIE-40GB": 8.0, "NVIDIA L4": 8.9,
        "NVIDIA A100 80GB PCIe": 8.0}
# max resident threads / SM and shared memory per SM (KiB) from the CUDA programming guide tables
MAXTHR = {6.0: 2048, 6.1: 2048, 7.0: 2048, 7.5: 1024, 8.0: 2048, 8.9: 1536}
SMEM_KB = {6.0: 64, 6.1: 96, 7.0: 96, 7.5: 64, 8.0: 164, 8.9: 100}


def specs() -> dict[str, dict]:
    """Spec sheet of each GPU (training and held-out) from the project's peaks.yaml."""
    with open(PEAKS) as f:
        chips = yaml.safe_load(f)["chips"]
    out = {}
    for c in chips:
        for a in c.get("aliases", []):
            if a in SHORT:
                out[a] = dict(
                    sms=c["sms"], cores=c["cores_per_sm"], clock=c["boost_clock_mhz"],
                    bw=c["memory_bandwidth_bytes_per_s"], l2=c["l2_cache_bytes"],
                    mem=c["memory_bytes"], flops=c["peak_flops_per_s"]["float32"],
                    arch=ARCH[a], maxthr=MAXTHR[ARCH[a]], smem=SMEM_KB[ARCH[a]],
                )
    return out


SPEC = specs()


def _read(path: str) -> pd.DataFrame:
    parts = []
    for ch in pd.read_csv(path, chunksize=200_000):
        parts.append(ch[ch["Device"].isin(TRAIN_DEVS)])
    df = pd.concat(parts, ignore_index=True)
    assert not df["Device"].isin(HELD_OUT).any()
    return df


def _norm(df: pd.DataFrame, fam: str, split: str) -> pd.DataFrame:
    out = pd.DataFrame({
        "fam": fam,
        "op": df["OPName"].astype(str),
        "dev": df["Device"].astype(str),
        "split": split,
        "lat": df["Latency"].astype(float),
        "kernel": df["Kernel Name"].astype(str),
        "gx": df["Grid x"], "gy": df["Grid y"], "gz": df["Grid z"],
        "bx": df["Block x"], "by": df["Block y"], "bz": df["Block z"],
    })
    for c in ["B", "M", "N", "K", "H"]:
        out[c] = df[c].astype(np.int64) if c in df else 0
    return out


def load(fam: str) -> pd.DataFrame:
    """All rows of a family on the five training GPUs: split 'train' (collect/) and 'test'."""
    os.makedirs(CACHE, exist_ok=True)
    cp = f"{CACHE}/{fam}.pkl"
    if os.path.exists(cp):
        return pd.read_pickle(cp)
    parts = []
    ops = EW_OPS if fam == "ew" else [fam]
    for op in ops:
        for d in TRAIN_DEVS:
            p = f"{ROOT}/train/collect/{op}/p2.1.0/{d}.csv.gz"
            parts.append(_norm(pd.read_csv(p), fam, "train"))
    tf = {"ew": "elem"}.get(fam, fam)
    t = _read(f"{ROOT}/test/{tf}.csv.gz")
    if fam == "ew":
        t = t[t["OPName"].isin(EW_OPS)]
    parts.append(_norm(t, fam, "test"))
    df = pd.concat(parts, ignore_index=True)
    assert set(df["dev"]) <= set(TRAIN_DEVS)
    df.to_pickle(cp)
    return df


def load_all() -> pd.DataFrame:
    return pd.concat([load(f) for f in FAMILIES], ignore_index=True)


# ---------------------------------------------------------------- work -------------------------
def work(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """FLOPs and DRAM bytes (fp32, compulsory traffic) of each row, as in operator_db's ops.py."""
    B, M, N, K, H = (df[c].to_numpy(np.float64) for c in "BMNKH")
    fam = df["fam"].to_numpy()
    op = df["op"].to_numpy()
    fl = np.zeros(len(df))
    by = np.zeros(len(df))
    m = fam == "bmm"
    fl[m] = 2 * B[m] * M[m] * N[m] * K[m]
    by[m] = 4 * (B[m] * M[m] * N[m] + B[m] * N[m] * K[m] + B[m] * M[m] * K[m])
    m = fam == "linear"
    fl[m] = 2 * B[m] * M[m] * N[m] * K[m]
    by[m] = 4 * (B[m] * M[m] * N[m] + N[m] * K[m] + K[m] + B[m] * M[m] * K[m])
    m = fam == "ln"
    fl[m] = 7 * B[m] * H[m]
    by[m] = 4 * (2 * B[m] * H[m] + 2 * H[m])
    m = fam == "softmax"
    fl[m] = 5 * B[m] * H[m]
    by[m] = 4 * 2 * B[m] * H[m]
    m = fam == "ew"
    binary = np.isin(op, ["add", "mul", "pow", "div"])
    fl[m] = B[m] * H[m]
    by[m] = np.where(binary[m], 12, 8) * B[m] * H[m]
    return fl, by


def devcol(df: pd.DataFrame, key: str) -> np.ndarray:
    return df["dev"].map(lambda d: SPEC[d][key]).to_numpy(np.float64)


def roofline_s(df: pd.DataFrame, dev: str | None = None) -> np.ndarray:
    """max(FLOPs/peak, bytes/bandwidth) in ms, on the row's own device or on `dev`."""
    fl, by = work(df)
    if dev is None:
        pk, bw = devcol(df, "flops"), devcol(df, "bw")
    else:
        pk, bw = SPEC[dev]["flops"], SPEC[dev]["bw"]
    return np.maximum(fl / pk, by / bw) * 1e3


# ---------------------------------------------------------------- metrics ----------------------
def ape(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    return np.abs(pred - true) / true * 100


def summarize(pred, true, lo=None, hi=None) -> dict:
    e = ape(np.asarray(pred), np.asarray(true))
    r = {"n": len(e), "med": float(np.median(e)), "mean": float(np.mean(e))}
    if lo is not None:
        r["cov"] = float(np.mean((true >= lo) & (true <= hi)) * 100)
    return r


def tile_of(kernel: str) -> tuple[int, int] | None:
    """GEMM tile (tm, tn) from an sgemm kernel name, e.g. ampere_sgemm_128x64_nn -> (128, 64)."""
    m = re.search(r"sgemm_(\d+)x(\d+)", kernel)
    if m:
        return int(m.group(1)), int(m.group(2))
    return None
