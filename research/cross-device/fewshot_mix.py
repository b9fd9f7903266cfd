"""Zero-shot ensembles and few-shot calibrations on top of the saved leave-one-GPU-out folds:
the offset model (fit_folds.py NAME, p0 = prediction with zero device offset) and the
per-GPU profile bases (profiles.py).

Zero-shot:  off_knn  = p0 + offset of the nearest training GPU in (arch, hbm, TDP/peak)
            prof_knn = that GPU's profile basis
            ens      = mean of the two (log space)
Few-shot (k configurations of the held-out GPU; design 'roof' = quantiles of log roofline time,
'space' = farthest-point sampling in standardized log-shape space, started at the median):
            off      = p0 + median residual
            pmix     = NNLS mixture of the four profile bases + intercept
            pmixg    = NNLS mixture of the four bases and p0 + intercept
            pmixg_loc= pmixg + kernel-smoothed calibration residuals (Gaussian in log-shape
                       space, bandwidth 1 in standardized units, shrunk with prior weight 1)
Intervals: split-conformal, 5 %/95 % quantiles of the same procedure's residuals on the other
held-out GPUs' test rows.

Usage: /work/main/.venv/bin/python fewshot_mix.py NAME fams [--k 5,8,10,12,15] [--design roof,space]
Writes results/eval_mix_<NAME>.csv
"""
from __future__ import annotations

import argparse
import pickle

import numpy as np
import pandas as pd
from scipy.optimize import nnls

import common as c
import evaluate as E
import logo


def shape_space(src: pd.DataFrame, fam: str) -> np.ndarray:
    cols = ["B", "M", "N", "K"] if fam in ("bmm", "linear") else ["B", "H"]
    Z = np.log2(src[cols].to_numpy(np.float64))
    if fam == "linear":
        Z = Z[:, 1:]
    return Z


def design_space(rows, Z, k):
    cand = np.where(rows.split.to_numpy() == "test")[0]
    Zc = Z[cand]
    sd = Zc.std(axis=0)
    sd[sd == 0] = 1
    Zs = (Zc - Zc.mean(axis=0)) / sd
    first = int(np.argmin(((Zs - np.median(Zs, axis=0)) ** 2).sum(1)))
    pick = [first]
    dmin = ((Zs - Zs[first]) ** 2).sum(1)
    while len(pick) < min(k, len(cand)):
        j = int(np.argmax(dmin))
        pick.append(j)
        dmin = np.minimum(dmin, ((Zs - Zs[j]) ** 2).sum(1))
    return cand[np.array(pick)]


def mix(A, y):
    mu = A.mean(axis=0)
    w, _ = nnls(A - mu, y - y.mean())
    if w.sum() == 0:
        w = np.full(A.shape[1], 1 / A.shape[1])
    return w, y.mean() - mu @ w


def local(res_cal, Zcal, Zall, h=1.0, prior=1.0):
    sd = Zall.std(axis=0)
    sd[sd == 0] = 1
    D = (((Zall[:, None, :] - Zcal[None, :, :]) / sd) ** 2).sum(-1)
    W = np.exp(-D / (2 * h * h))
    return (W @ res_cal) / (W.sum(1) + prior)


def run(name, fams, ks, designs):
    out = []
    for fam in fams:
        F = pickle.load(open(f"/tmp/xdev/results/folds_{name}_{fam}.pkl", "rb"))
        P = pickle.load(open(f"/tmp/xdev/results/profiles_{fam}.pkl", "rb"))
        df = c.load(fam)
        methods = [("zero", m, 0, "-") for m in ("off_knn", "prof_knn", "ens")]
        methods += [("few", m, k, dz) for dz in designs for k in ks
                    for m in ("off", "pmix", "pmixg", "pmixg_loc", "pmixg_loc_gate")]
        for mode, meth, k, dz in methods:
            per = {}
            for fold in F["folds"]:
                d, rows = fold["dev"], fold["rows"].reset_index(drop=True)
                idx, Bs = P[d]
                Bs = Bs.loc[rows.idx.to_numpy()]
                src = df.loc[rows.idx.to_numpy()]
                y, p0 = rows.y.to_numpy(), rows.p0.to_numpy()
                keep = np.ones(len(rows), bool)
                dist = logo.spec_dist(d, list(Bs.columns), E.KEYS)
                near = min(dist, key=dist.get)
                if mode == "zero":
                    pk = p0 + fold["a"][near]
                    pp = Bs[near].to_numpy()
                    p = {"off_knn": pk, "prof_knn": pp, "ens": 0.5 * (pk + pp)}[meth]
                else:
                    lroof = np.log(c.roofline_s(src))
                    Z = shape_space(src, fam)
                    cal = E.design(rows, lroof, k) if dz == "roof" else design_space(rows, Z, k)
                    keep[cal] = False
                    if meth == "off":
                        p = p0 + np.median(y[cal] - p0[cal])
                    else:
                        A = Bs.to_numpy()
                        if meth != "pmix":
                            A = np.column_stack([A, p0])
                        w, b = mix(A[cal], y[cal])
                        p = A @ w + b
                        if meth.startswith("pmixg_loc"):
                            p = p + local(y[cal] - p[cal], Z[cal], Z)
                        if meth == "pmixg_loc_gate":
                            # outside the calibrated range of log roofline time fall back to
                            # the zero-shot ensemble (Gaussian in the distance, sd 0.5 in ln)
                            lo, hi = lroof[cal].min(), lroof[cal].max()
                            out_d = np.maximum(0, np.maximum(lo - lroof, lroof - hi))
                            wg = np.exp(-out_d ** 2 / (2 * 0.5 ** 2))
                            # and by the distance to the nearest calibration shape in
                            # log-shape space (standardized on the test shapes, sd 1.5)
                            tst = rows.split.to_numpy() == "test"
                            sdz = Z[tst].std(axis=0)
                            sdz[sdz == 0] = 1
                            dz2 = ((((Z[:, None, :] - Z[cal][None, :, :]) / sdz) ** 2).sum(-1)).min(1)
                            wg = np.minimum(wg, np.exp(-dz2 / (2 * 1.5 ** 2)))
                            pz = 0.5 * (p0 + fold["a"][near] + Bs[near].to_numpy())
                            p = wg * p + (1 - wg) * pz
                per[d] = rows.assign(p=p)[keep]
            for d, x in per.items():
                pool = pd.concat([per[s] for s in per if s != d])
                pool = pool[pool.split == "test"]
                qlo, qhi = np.quantile(pool.y - pool.p, [0.05, 0.95])
                # 'union': the widest of the other GPUs' own 5 %/95 % residual quantiles
                qs = [np.quantile((per[s].y - per[s].p)[per[s].split == "test"], [0.05, 0.95])
                      for s in per if s != d]
                ulo, uhi = min(q[0] for q in qs), max(q[1] for q in qs)
                for s in ["test", "train"]:
                    xs = x[x.split == s]
                    e = np.abs(np.exp(xs.p - xs.y) - 1) * 100
                    r = xs.y - xs.p
                    out.append(dict(name=name, fam=fam, mode=mode, rule=meth, k=k, design=dz,
                                    held_out=c.SHORT[d], split=s, n=len(xs),
                                    med=float(np.median(e)), mean=float(np.mean(e)),
                                    cov=float(((r >= qlo) & (r <= qhi)).mean() * 100),
                                    width=float(np.exp(qhi - qlo)),
                                    cov_union=float(((r >= ulo) & (r <= uhi)).mean() * 100),
                                    width_union=float(np.exp(uhi - ulo))))
    return pd.DataFrame(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("fams")
    ap.add_argument("--k", default="5,8,10,12,15")
    ap.add_argument("--design", default="roof,space")
    a = ap.parse_args()
    res = run(a.name, a.fams.split(","), [int(k) for k in a.k.split(",")], a.design.split(","))
    res.to_csv(f"/tmp/xdev/results/eval_mix_{a.name}_{a.fams.replace(',', '_')}.csv", index=False)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_rows", 500)
    t = res[res.split == "test"]
    t = t.assign(m=t["mode"] + ":" + t["rule"] + ":" + t["design"] + ":" + t["k"].astype(str))
    for v in ["med", "cov", "cov_union"]:
        pv = t.pivot_table(index=["fam", "m"], columns="held_out", values=v).round(1)
        pv["avg"] = pv.mean(axis=1).round(1)
        pv["max"] = pv.iloc[:, :5].max(axis=1)
        print(f"\n{v} (test rows)\n", pv.to_string())


if __name__ == "__main__":
    main()
