"""Score saved leave-one-GPU-out folds (fit_folds.py): zero-shot offset rules, few-shot
calibration, split-conformal 90 % intervals.

Usage: /work/main/.venv/bin/python evaluate.py NAME [fams] [--k 5,10] [--rules ...]
Writes results/eval_<NAME>.csv (one row per rule/k, held-out GPU, family, split).

Zero-shot: p = p0 + a, a from the four training GPUs' fitted offsets by a rule:
  mean | median | knn (nearest GPU in standardized (arch, hbm, TDP/FP32 peak)) | blend
  (average of knn and median, in log space).
Few-shot: k calibration configurations of the held-out GPU, chosen from its family's test shape
list by shape alone: the rows nearest the quantiles (i + 0.5) / k of the roofline time on the
GPU's spec sheet; correction 'off' = median of (y - p0) over them; 'offslope' = that plus a
slope on the standardized log roofline time, shrunk (ridge, lambda = 2 k); both replace the
zero-shot offset. The calibration rows are removed from the scored rows.
Intervals: the 5 % and 95 % quantiles of the same procedure's residuals (y - p) on the OTHER
held-out GPUs' test rows (split-conformal over leave-one-GPU-out residuals).
"""
from __future__ import annotations

import argparse
import pickle

import numpy as np
import pandas as pd

import common as c
import logo

KEYS = ("arch", "hbm", "tdp_tf")


def zero_offset(a: dict, d: str, rule: str) -> float:
    v = np.array(list(a.values()))
    if rule == "mean":
        return float(v.mean())
    if rule == "median":
        return float(np.median(v))
    dist = logo.spec_dist(d, list(a), KEYS)
    knn = a[min(dist, key=dist.get)]
    if rule == "knn":
        return knn
    if rule == "blend":
        return 0.5 * (knn + float(np.median(v)))
    raise ValueError(rule)


def design(rows: pd.DataFrame, lroof: np.ndarray, k: int) -> np.ndarray:
    """Positions (into rows) of k test-split rows spanning the range of log roofline time."""
    cand = np.where(rows.split.to_numpy() == "test")[0]
    order = cand[np.argsort(lroof[cand], kind="stable")]
    pick = []
    for q in (np.arange(k) + 0.5) / k:
        i = int(round(q * (len(order) - 1)))
        j = i
        while order[j] in pick:  # next unused
            j = (j + 1) % len(order)
        pick.append(order[j])
    return np.array(pick)


def calibrate(r, z, kind):
    """Returns a function z -> correction, fitted on calibration residuals r at positions z."""
    a = float(np.median(r))
    if kind == "off" or len(r) < 3:
        return lambda zz: np.full(len(zz), a)
    lam = 2.0 * len(r)
    zc = z - z.mean()
    beta = float((zc * (r - r.mean())).sum() / ((zc ** 2).sum() + lam))
    a2 = float(np.median(r - beta * zc))
    return lambda zz: a2 + beta * (zz - z.mean())


def run(name, fams, ks, rules, kinds):
    out = []
    for fam in fams:
        with open(f"/tmp/xdev/results/folds_{name}_{fam}.pkl", "rb") as f:
            F = pickle.load(f)
        df = c.load(fam)
        methods = [("zero", r, 0) for r in rules] + [("few", kd, k) for kd in kinds for k in ks]
        for mode, rule, k in methods:
            per = {}
            for fold in F["folds"]:
                d, rows = fold["dev"], fold["rows"].copy()
                src = df.loc[rows.idx]
                lroof = np.log(c.roofline_s(src))
                keep = np.ones(len(rows), bool)
                if mode == "zero":
                    p = rows.p0.to_numpy() + zero_offset(fold["a"], d, rule)
                    cost = 0.0
                else:
                    cal = design(rows, lroof, k)
                    r = (rows.y - rows.p0).to_numpy()[cal]
                    zs = (lroof - lroof.mean()) / lroof.std()
                    fcorr = calibrate(r, zs[cal], rule)
                    p = rows.p0.to_numpy() + fcorr(zs)
                    keep[cal] = False
                    cost = float((25 * src.lat.to_numpy()[cal] / 1e3 + 0.2).sum())
                per[d] = (rows.assign(p=p)[keep], cost)
            for d, (x, cost) in per.items():
                pool = pd.concat([per[s][0] for s in per if s != d])
                pool = pool[pool.split == "test"]
                qlo, qhi = np.quantile(pool.y - pool.p, [0.05, 0.95])
                for s in ["test", "train"]:
                    xs = x[x.split == s]
                    e = np.abs(np.exp(xs.p - xs.y) - 1) * 100
                    r = xs.y - xs.p
                    out.append(dict(name=name, fam=fam, mode=mode, rule=rule, k=k,
                                    held_out=c.SHORT[d], split=s, n=len(xs),
                                    med=float(np.median(e)), mean=float(np.mean(e)),
                                    cov=float(((r >= qlo) & (r <= qhi)).mean() * 100),
                                    width=float(np.exp(qhi - qlo)), cal_cost_s=cost))
    return pd.DataFrame(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("fams", nargs="?", default=",".join(c.FAMILIES))
    ap.add_argument("--k", default="3,5,8,10,12")
    ap.add_argument("--rules", default="mean,median,knn,blend")
    ap.add_argument("--kinds", default="off,offslope")
    a = ap.parse_args()
    res = run(a.name, a.fams.split(","), [int(k) for k in a.k.split(",")],
              a.rules.split(","), a.kinds.split(","))
    res.to_csv(f"/tmp/xdev/results/eval_{a.name}.csv", index=False)
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
