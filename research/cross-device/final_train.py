"""Train the recommended predictor on the five training GPUs (all their training and test rows)
and time it.  Nothing here reads a held-out GPU's latencies; they are only named as targets
(spec sheet from peaks.yaml) to show which training GPU the zero-shot rule picks for them.

Per family (bmm, linear, ew, ln, softmax):
  g    : OffsetModel(fset='rel', base = FP32 time for bmm/linear, DRAM time otherwise):
         ln(t / base) = a_GPU + g(shape, device-relative features), GBT 300 iterations,
         learning rate 0.08, 31 leaves, min 40 rows per leaf, L2 1.0, squared loss; each GPU's
         test rows together weigh as much as its training rows.
  prof : one GBT per training GPU of ln(t / roofline) on shape features (same settings).
Zero-shot for a GPU d (spec sheet only):
  s*   = nearest training GPU in standardized (compute capability, HBM or not, TDP / FP32 peak)
  ln t = 0.5 * [g(x, d) + a_{s*} + ln base_d(x)] + 0.5 * [ln t^_{s*}(x) + ln(base_d / base_{s*})]
Few-shot (calibrate()): NNLS mixture of the five profile bases and the g basis + intercept on
the calibration rows, then a kernel smoother of their residuals in log-shape space (pmixg_loc),
except ew: median offset on the g basis (off).
Intervals: split-conformal quantiles of leave-one-GPU-out residuals (results/eval_mix_*.csv):
zero-shot the union of the other GPUs' 5 %/95 % residual quantiles, few-shot pooled.

Usage: /work/main/.venv/bin/python final_train.py [--cap N]   (N: training-split rows per GPU
and family, 0 = all). Writes /tmp/xdev/results/final_model.pkl and prints the timing.
"""
from __future__ import annotations

import os

# one OpenMP thread: on this shared 2-core machine the GBT fits are ~5x faster than with two
# (thread synchronisation under contention); set before scikit-learn is imported
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import pickle
import time

import numpy as np

import common as c
import logo
import profiles


def train(cap=0):
    models = {}
    t_all = time.time()
    n_rows = 0
    for fam in c.FAMILIES:
        t0 = time.time()
        df = logo.subsample(c.load(fam), cap)
        n_rows += len(df)
        base = "tc" if fam in ("bmm", "linear") else "tm"
        g = logo.OffsetModel(fset="rel", base=base, offset="knn", keys=("arch", "hbm", "tdp_tf"),
                             max_iter=300, learning_rate=0.08).fit(df)
        prof = profiles.fit_per_device(fam, cap=cap if cap else 10 ** 9)
        models[fam] = dict(g=g, prof=prof, base=base)
        print(f"  {fam}: {len(df)} rows, {time.time() - t0:.0f}s", flush=True)
    print(f"trained on {n_rows} rows in {time.time() - t_all:.0f}s", flush=True)
    return models


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cap", type=int, default=0)
    a = ap.parse_args()
    models = train(a.cap)
    with open("/tmp/xdev/results/final_model.pkl", "wb") as f:
        pickle.dump(models, f)
    for d in c.HELD_OUT:
        dist = logo.spec_dist(d, c.TRAIN_DEVS, ("arch", "hbm", "tdp_tf"))
        print(f"zero-shot source for {c.SHORT[d]}: {c.SHORT[min(dist, key=dist.get)]} "
              f"(distances {{{', '.join(f'{c.SHORT[s]}: {v:.2f}' for s, v in dist.items())}}})")


if __name__ == "__main__":
    main()
