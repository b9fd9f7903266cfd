"""Fit the offset + shared-shape model once per leave-one-GPU-out fold and save, for every row of
the held-out GPU, p0 = the prediction with a zero device offset, plus the four training GPUs'
fitted offsets. Any zero-shot offset rule and any few-shot calibration is then scored by
evaluate.py without refitting.

Usage: /work/main/.venv/bin/python fit_folds.py NAME fam1,fam2 [--fset rel] [--cap 4000]
       [--iters 300] [--tw 1.0]
Writes results/folds_<NAME>_<fam>.pkl
"""
from __future__ import annotations

import argparse
import pickle
import time

import numpy as np
import pandas as pd

import common as c
import features as F
import logo
import tiles as T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("fams")
    ap.add_argument("--fset", default="rel")
    ap.add_argument("--cap", type=int, default=4000)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--lr", type=float, default=0.08)
    ap.add_argument("--tw", type=float, default=1.0)
    ap.add_argument("--base", default="auto")
    ap.add_argument("--loss", default="squared_error")
    ap.add_argument("--tiles", default="nn_arch", help="held-out GPU's tiles: own | nn_arch")
    a = ap.parse_args()
    for fam in a.fams.split(","):
        df = c.load(fam)
        if a.fset == "tile":
            df = df.copy()
            df["t1"], df["t2"] = T.F.kernel_tile(df)
        base = a.base if a.base != "auto" else ("tc" if fam in ("bmm", "linear") else "tm")
        folds = []
        t0 = time.time()
        for d in c.TRAIN_DEVS:
            tr = logo.subsample(df[df.dev != d], a.cap)
            m = logo.OffsetModel(fset=a.fset, base=base, test_weight=a.tw, loss=a.loss,
                                 max_iter=a.iters, learning_rate=a.lr).fit(tr)
            ho = df[df.dev == d]
            if a.fset == "tile" and a.tiles == "nn_arch":
                s = T.nearest_arch(d, c.TRAIN_DEVS)
                ho = ho.copy()
                ho["t1"], ho["t2"] = T.copy_tiles(df[df.dev == s], ho)
                print(f"  {fam} held-out {c.SHORT[d]}: tiles copied from {c.SHORT[s]}; "
                      f"agree with its own kernels on "
                      f"{np.mean((ho.t1 == df.loc[ho.index, 't1']) & (ho.t2 == df.loc[ho.index, 't2'])):.0%}",
                      flush=True)
            p0 = m.predict(ho, offsets={d: 0.0})
            folds.append(dict(dev=d, a=m.a, rows=pd.DataFrame({
                "dev": c.SHORT[d], "split": ho.split.to_numpy(), "idx": ho.index.to_numpy(),
                "y": F.target(ho), "p0": p0})))
        with open(f"/tmp/xdev/results/folds_{a.name}_{fam}.pkl", "wb") as f:
            pickle.dump(dict(fam=fam, base=base, args=vars(a), folds=folds), f)
        print(f"{a.name} {fam}: {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
