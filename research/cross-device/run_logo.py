"""Leave-one-GPU-out predictions of a named method, saved for scoring and few-shot calibration.

Usage: /work/main/.venv/bin/python run_logo.py METHOD fam1,fam2,...   [--cap N]
Writes results/preds_<METHOD>_<fam>.pkl: one row per held-out row (dev, split, idx, y, p),
y = ln(measured / roofline on the held-out GPU's spec sheet), p = the prediction of it.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import os
import time

import numpy as np
import pandas as pd

import common as c
import features as F
import logo

GEMM = ("bmm", "linear")


def make(method, fam):
    base = "tc" if fam in GEMM else "tm"
    it = dict(max_iter=300, learning_rate=0.08)
    M = {
        # plain GBT of ln(t/roofline) on shape + device-relative + raw device facts
        "gbt_dev": lambda: logo.GBTModel(fset="dev", **it),
        "gbt_devlite": lambda: logo.GBTModel(fset="devlite", **it),
        # pooled, device-agnostic shape model (= roofline x learned efficiency)
        "gbt_shape": lambda: logo.GBTModel(fset="shape", **it),
        # offset + shared shape model, offset of a new GPU from its nearest training GPU
        "off_knn": lambda: logo.OffsetModel(fset="rel", base=base, offset="knn",
                                            keys=("arch", "hbm", "tdp_tf"), **it),
        "off_mean": lambda: logo.OffsetModel(fset="rel", base=base, offset="mean", **it),
        "off_median": lambda: logo.OffsetModel(fset="rel", base=base, offset="median", **it),
        "off_knn_shape": lambda: logo.OffsetModel(fset="shape", base=base, offset="knn",
                                                  keys=("arch", "hbm", "tdp_tf"), **it),
    }
    return M[method]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("method")
    ap.add_argument("fams")
    ap.add_argument("--cap", type=int, default=4000)
    a = ap.parse_args()
    os.makedirs("/tmp/xdev/results", exist_ok=True)
    allres = []
    for fam in a.fams.split(","):
        t0 = time.time()
        pr = logo.logo(fam, make(a.method, fam), verbose=False, cap=a.cap)
        pr.to_pickle(f"/tmp/xdev/results/preds_{a.method}_{fam}.pkl")
        s = logo.score(pr)
        allres.append(s.assign(fam=fam))
        t = s.pivot(index="held_out", columns="split", values="med").round(1)
        print(f"{a.method} {fam} ({time.time() - t0:.0f}s) test med {t['test'].to_dict()} "
              f"| train med {t['train'].to_dict()}", flush=True)
    pd.concat(allres).to_csv(f"/tmp/xdev/results/logo_{a.method}.csv", index=False)


if __name__ == "__main__":
    main()
