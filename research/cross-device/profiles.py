"""Profile-mixture predictor: one in-distribution model per training GPU, transferred by peak ratio.

Per training GPU s and family: a GBT of ln(t_s / roofline_s) on shape features (fitted on all
of s's rows, training split capped). For a GPU d without measurements, source s gives the basis
    b_s(x) = ln t^_s(x) + ln(base_d(x) / base_s(x))      (base: FP32 time for bmm/linear,
                                                          DRAM time for ew/ln/softmax)
i.e. "the same shape on GPU s, scaled by the peak ratio" (the nearest-GPU baseline with a model
in place of the measurement, so any shape is covered).
Zero-shot: p = b_{s*} with s* the training GPU nearest in standardized (arch, hbm, TDP/peak)
('pknn'), or b averaged over the four sources ('pavg').
Few-shot (k calibration rows chosen as in evaluate.design): 'pbest' = the source whose basis,
shifted by the median residual, fits the calibration rows best (median |residual|), plus that
shift; 'pmix' = a non-negative least-squares mixture of the four bases plus an intercept.

Usage: /work/main/.venv/bin/python profiles.py [fams] [--k 3,5,8,10,12]
Writes results/eval_profiles.csv and results/profiles_<fam>.pkl (per-GPU models' held-out bases).
"""
from __future__ import annotations

import argparse
import os
import pickle
import time

import numpy as np
import pandas as pd
from scipy.optimize import nnls

import common as c
import evaluate as E
import features as F
import logo


def fit_per_device(fam, cap=4000):
    df = c.load(fam)
    models = {}
    for s in c.TRAIN_DEVS:
        x = logo.subsample(df[df.dev == s], cap)
        m = logo.GBTModel(fset="shape", test_weight=1.0, max_iter=300, learning_rate=0.08)
        models[s] = m.fit(x)
    return models


def bases(models, fam, rows):
    """ln t^_s(x) + ln(base_d / base_s) - ln roof_d(x): the basis in the target's units."""
    base = "tc" if fam in ("bmm", "linear") else "tm"
    out = {}
    lroof_d = np.log(c.roofline_s(rows))
    lbase_d = np.log(logo.base_ms(rows, base))
    for s, m in models.items():
        rs = rows.assign(dev=s)
        lt = m.predict(rs) + np.log(c.roofline_s(rs))
        out[s] = lt - np.log(logo.base_ms(rs, base)) + lbase_d - lroof_d
    return pd.DataFrame(out, index=rows.index)


def run(fams, ks):
    res = []
    for fam in fams:
        t0 = time.time()
        models = fit_per_device(fam)
        df = c.load(fam)
        per = {}
        for d in c.TRAIN_DEVS:
            rows = df[df.dev == d]
            Bs = bases({s: m for s, m in models.items() if s != d}, fam, rows)
            per[d] = (rows, Bs)
        with open(f"/tmp/xdev/results/profiles_{fam}.pkl", "wb") as f:
            pickle.dump({d: (r.index.to_numpy(), b) for d, (r, b) in per.items()}, f)
        print(f"{fam}: per-GPU models and bases {time.time() - t0:.0f}s", flush=True)
        methods = [("zero", "pknn", 0), ("zero", "pavg", 0)] + \
                  [("few", kd, k) for kd in ("pbest", "pmix") for k in ks]
        for mode, rule, k in methods:
            preds = {}
            for d, (rows, Bs) in per.items():
                y = F.target(rows)
                keep = np.ones(len(rows), bool)
                if rule == "pknn":
                    dist = logo.spec_dist(d, list(Bs.columns), E.KEYS)
                    p = Bs[min(dist, key=dist.get)].to_numpy()
                elif rule == "pavg":
                    p = Bs.mean(axis=1).to_numpy()
                else:
                    lroof = np.log(c.roofline_s(rows))
                    cal = E.design(rows.assign(split=rows.split.to_numpy()), lroof, k)
                    keep[cal] = False
                    if rule == "pbest":
                        best, bs = None, np.inf
                        for s in Bs.columns:
                            r = y[cal] - Bs[s].to_numpy()[cal]
                            sc = np.median(np.abs(r - np.median(r)))
                            if sc < bs:
                                best, bs = s, sc
                        p = Bs[best].to_numpy() + np.median(y[cal] - Bs[best].to_numpy()[cal])
                    else:
                        A = Bs.to_numpy()[cal]
                        mu = A.mean(axis=0)
                        # y - mean(y) = (A - mean A) w, w >= 0; intercept from the means
                        w, _ = nnls(A - mu, y[cal] - y[cal].mean())
                        if w.sum() == 0:
                            w = np.full(A.shape[1], 1 / A.shape[1])
                        icpt = y[cal].mean() - mu @ w
                        p = Bs.to_numpy() @ w + icpt
                preds[d] = pd.DataFrame({"split": rows.split.to_numpy(), "y": y, "p": p})[keep]
            for d, x in preds.items():
                pool = pd.concat([preds[s] for s in preds if s != d])
                pool = pool[pool.split == "test"]
                qlo, qhi = np.quantile(pool.y - pool.p, [0.05, 0.95])
                for s in ["test", "train"]:
                    xs = x[x.split == s]
                    e = np.abs(np.exp(xs.p - xs.y) - 1) * 100
                    r = xs.y - xs.p
                    res.append(dict(name="profiles", fam=fam, mode=mode, rule=rule, k=k,
                                    held_out=c.SHORT[d], split=s, n=len(xs),
                                    med=float(np.median(e)), mean=float(np.mean(e)),
                                    cov=float(((r >= qlo) & (r <= qhi)).mean() * 100),
                                    width=float(np.exp(qhi - qlo))))
    return pd.DataFrame(res)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fams", nargs="?", default=",".join(c.FAMILIES))
    ap.add_argument("--k", default="3,5,8,10,12")
    a = ap.parse_args()
    res = run(a.fams.split(","), [int(k) for k in a.k.split(",")])
    res.to_csv("/tmp/xdev/results/eval_profiles.csv", index=False)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_rows", 500)
    t = res[res.split == "test"]
    t = t.assign(m=t["mode"] + ":" + t["rule"] + ":" + t["k"].astype(str))
    for v in ["med", "cov"]:
        pv = t.pivot_table(index=["fam", "m"], columns="held_out", values=v).round(1)
        pv["avg"] = pv.mean(axis=1).round(1)
        pv["max"] = pv.iloc[:, :5].max(axis=1)
        print(f"\n{v} (test rows)\n", pv.to_string())


if __name__ == "__main__":
    main()
