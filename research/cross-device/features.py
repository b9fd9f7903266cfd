"""Features of (configuration, GPU) pairs, computed from the shape and the GPU's spec sheet only.

Target: y = ln(latency / roofline bound) with the bound on the row's GPU from its spec sheet.
No feature reads a measurement (the launched kernel, grid or timing are never inputs).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

import common as c

# spec-sheet facts not in peaks.yaml (board power from the same datasheets; memory technology)
TDP_W = {"Tesla P4": 75, "Tesla P100-PCIE-16GB": 250, "Tesla V100-PCIE-32GB": 250,
         "Tesla T4": 70, "NVIDIA A100-PCIE-40GB": 250, "NVIDIA L4": 72,
         "NVIDIA A100 80GB PCIe": 300}
HBM = {"Tesla P4": 0, "Tesla P100-PCIE-16GB": 1, "Tesla V100-PCIE-32GB": 1, "Tesla T4": 0,
       "NVIDIA A100-PCIE-40GB": 1, "NVIDIA L4": 0, "NVIDIA A100 80GB PCIe": 1}
# candidate SIMT sgemm tiles (extent along the output's columns K, along its rows M)
TILES = [(128, 128), (128, 64), (64, 64), (32, 128), (128, 32)]
L2 = np.log2


def dev_frame(dev: pd.Series) -> pd.DataFrame:
    u = {d: c.SPEC[d] for d in dev.unique()}
    f = lambda k: dev.map({d: s[k] for d, s in u.items()}).to_numpy(np.float64)
    out = pd.DataFrame(index=dev.index)
    out["sms"] = f("sms")
    out["cores"] = f("cores")
    out["clock"] = f("clock")
    out["bw"] = f("bw")
    out["peak"] = f("flops")
    out["l2"] = f("l2")
    out["arch"] = f("arch")
    out["maxthr"] = f("maxthr")
    out["tdp"] = dev.map(TDP_W).to_numpy(np.float64)
    out["hbm"] = dev.map(HBM).to_numpy(np.float64)
    return out


def features(df: pd.DataFrame, fset: str) -> pd.DataFrame:
    """fset: 'shape' (device-agnostic), 'rel' (+ device-relative), 'dev' (+ raw device facts),
    'devlite' (rel + a few device facts), 'tile' (rel + the GEMM tile's wave features; needs
    columns t1, t2 in df)."""
    if fset == "tile":
        X = features(df, "rel")
        T = tile_features(df, df.t1.to_numpy(np.float64), df.t2.to_numpy(np.float64))
        return pd.concat([X, T], axis=1)
    fam = df.fam.iloc[0]
    D = dev_frame(df.dev)
    fl, by = c.work(df)
    X = pd.DataFrame(index=df.index)
    B, M, N, K, H = (df[k].to_numpy(np.float64) for k in "BMNKH")
    if fam in ("bmm", "linear"):
        X["lB"], X["lM"], X["lN"], X["lK"] = L2(B), L2(M), L2(N), L2(K)
        X["lMK"] = L2(M * K)
        # device-independent padding efficiency of each candidate tile
        for t1, t2 in TILES:
            X[f"pad{t1}x{t2}"] = (M * K) / (np.ceil(K / t1) * t1 * np.ceil(M / t2) * t2)
        X["n_mod4"] = (N % 4 == 0).astype(float)
    else:
        X["lB"], X["lH"] = L2(B), L2(H)
        X["h_mod4"] = (H % 4 == 0).astype(float)
        if fam == "ew":
            X["op"] = df.op.map({o: i for i, o in enumerate(c.EW_OPS)}).to_numpy()
    X["lflops"], X["lbytes"] = L2(fl), L2(by)
    X["lai"] = L2(fl / by)
    if fset == "shape":
        return X
    sms = D.sms.to_numpy()
    X["lroof"] = L2(np.maximum(fl / D.peak, by / D.bw) * 1e3)  # ms
    X["ltc"] = L2(fl / D.peak * 1e3)
    X["ltm"] = L2(by / D.bw * 1e3)
    X["ridge"] = L2(fl / by) - L2(D.peak / D.bw)
    X["lbytes_l2"] = L2(by / D.l2)
    if fam in ("bmm", "linear"):
        for t1, t2 in TILES[:3]:
            tiles = B * np.ceil(K / t1) * np.ceil(M / t2)
            X[f"lw{t1}x{t2}"] = L2(tiles / sms)
            X[f"q{t1}x{t2}"] = tiles / (np.ceil(tiles / sms) * sms)
        # per-SM work: FLOPs per SM per cycle-ish
        X["lflops_sm"] = L2(fl / sms)
    else:
        elems = B * H
        X["lrows_sm"] = L2(B / sms)
        X["lthr_waves"] = L2(elems / 4 / (sms * D.maxthr.to_numpy()))
    if fset == "rel":
        return X
    X["lsms"] = L2(sms)
    X["lbw"] = L2(D.bw.to_numpy())
    X["lpeak"] = L2(D.peak.to_numpy())
    X["ll2"] = L2(D.l2.to_numpy())
    X["tdp_tf"] = D.tdp.to_numpy() / (D.peak.to_numpy() / 1e12)
    X["hbm"] = D.hbm.to_numpy()
    if fset == "devlite":
        return X
    X["clock"] = D.clock.to_numpy()
    X["cores"] = D.cores.to_numpy()
    X["arch"] = D.arch.to_numpy()
    X["bw_sm"] = D.bw.to_numpy() / sms / 1e9
    return X


def target(df: pd.DataFrame) -> np.ndarray:
    return np.log(df.lat.to_numpy() / c.roofline_s(df))


def kernel_tile(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(t1, t2) of the launched sgemm kernel (t1 along the output's columns K, t2 along M)."""
    t = df.kernel.str.extract(r"sgemm_(\d+)x(\d+)")
    return t[0].astype(float).to_numpy(), t[1].astype(float).to_numpy()


def tile_features(df: pd.DataFrame, t1: np.ndarray, t2: np.ndarray) -> pd.DataFrame:
    """Wave/tile quantization features for a given GEMM tile per row."""
    D = dev_frame(df.dev)
    sms = D.sms.to_numpy()
    B, M, N, K = (df[k].to_numpy(np.float64) for k in "BMNK")
    nk, nm = np.ceil(K / t1), np.ceil(M / t2)
    tiles = B * nk * nm
    X = pd.DataFrame(index=df.index)
    X["t_lt1"], X["t_lt2"] = L2(t1), L2(t2)
    X["t_pad"] = (M * K) / (nk * t1 * nm * t2)
    X["t_lwaves"] = L2(tiles / sms)
    X["t_wq"] = tiles / (np.ceil(tiles / sms) * sms)
    X["t_lfl_tile"] = L2(2 * t1 * t2 * N)
    return X
