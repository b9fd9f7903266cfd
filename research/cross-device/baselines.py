"""Baselines under leave-one-GPU-out on the five training GPUs.

  roofline : max(FLOPs / FP32 peak, bytes / DRAM bandwidth) of the held-out GPU's spec sheet.
  nearest  : the same shape's measured time on the nearest training GPU x peak ratio
             (FP32 peak ratio for bmm/linear, DRAM-bandwidth ratio for ew/ln/softmax).
             "Nearest" = smallest Euclidean distance between spec vectors
             z(log FP32 peak, log DRAM BW, log SMs, log L2) standardized over the 7 GPUs' sheets,
             among the four other training GPUs that measured that shape.
  nearest_roof : same source GPU, scaled by the ratio of the two GPUs' roofline bounds of the row
             (= FLOP ratio when compute bound on both, BW ratio when memory bound).
  li       : Li et al. (MICRO'23) as NeuSight reimplements it: per GPU a least-squares line
             t = coef * work + intercept (work = FLOPs for bmm/linear, bytes otherwise) on its
             training rows; for the held-out GPU 1/coef is regressed linearly on DRAM BW across the
             four others and the intercept is 0.

Intervals: split-conformal in log space; the 5 % / 95 % quantiles of log(measured / predicted)
of the same baseline applied to each of the four other GPUs (their test rows) widen the point
prediction of the held-out GPU.

Run: /work/main/.venv/bin/python /tmp/xdev/baselines.py   -> results/baselines.csv
"""
from __future__ import annotations

import numpy as np
import pandas as pd

import common as c

KEY = ["op", "B", "M", "N", "K", "H"]


def spec_vec(d):
    s = c.SPEC[d]
    return np.array([np.log(s["flops"]), np.log(s["bw"]), np.log(s["sms"]), np.log(s["l2"])])


_ALL = np.array([spec_vec(d) for d in c.SHORT])
_MU, _SD = _ALL.mean(0), _ALL.std(0)


def nearest_order(d, pool):
    z = (spec_vec(d) - _MU) / _SD
    dist = {s: float(np.linalg.norm(z - (spec_vec(s) - _MU) / _SD)) for s in pool if s != d}
    return sorted(dist, key=dist.get)


def pred_roofline(df, d):
    return c.roofline_s(df, d)


def pred_nearest(df_all, rows, d, fam, mode="peak"):
    """rows: the held-out GPU's rows to predict; df_all: every training GPU's rows."""
    order = nearest_order(d, c.TRAIN_DEVS)
    out = np.full(len(rows), np.nan)
    src = np.empty(len(rows), dtype=object)
    keyed = rows[KEY].astype(str).agg("|".join, axis=1).to_numpy()
    for s in order:
        x = df_all[(df_all.dev == s) & (df_all.split == rows.split.iloc[0])]
        if len(x) == 0:
            continue
        k = x[KEY].astype(str).agg("|".join, axis=1)
        lut = x.assign(k=k.to_numpy()).groupby("k").lat.mean()
        miss = np.isnan(out)
        v = pd.Series(keyed[miss]).map(lut).to_numpy()
        if mode == "peak":
            key = "flops" if fam in ("bmm", "linear") else "bw"
            v = v * c.SPEC[s][key] / c.SPEC[d][key]
        else:
            sub = rows[miss]
            v = v * c.roofline_s(sub, d) / c.roofline_s(sub, s)
        idx = np.where(miss)[0]
        ok = ~np.isnan(v)
        out[idx[ok]] = v[ok]
        src[idx[ok]] = c.SHORT[s]
        if not np.isnan(out).any():
            break
    return out, src


def li_fit(df):
    fl, by = c.work(df)
    w = fl if df.fam.iloc[0] in ("bmm", "linear") else by
    A = np.vstack([w, np.ones_like(w)]).T
    coef, icpt = np.linalg.lstsq(A, df.lat.to_numpy() / 1e3, rcond=None)[0]
    return coef, icpt


def pred_li(df_all, rows, d, fam):
    others = [s for s in c.TRAIN_DEVS if s != d]
    inv, bws = [], []
    for s in others:
        tr = df_all[(df_all.dev == s) & (df_all.split == "train")]
        coef, _ = li_fit(tr)
        inv.append(1 / coef)
        bws.append(c.SPEC[s]["bw"])
    a, b = np.polyfit(bws, inv, 1)
    coef = 1 / (a * c.SPEC[d]["bw"] + b)
    fl, by = c.work(rows)
    w = fl if fam in ("bmm", "linear") else by
    return coef * w * 1e3


def predict(method, df, rows, d, fam):
    if method == "roofline":
        return pred_roofline(rows, d)
    if method == "nearest":
        return pred_nearest(df, rows, d, fam, "peak")[0]
    if method == "nearest_roof":
        return pred_nearest(df, rows, d, fam, "roof")[0]
    if method == "li":
        return pred_li(df, rows, d, fam)
    raise ValueError(method)


def main():
    res = []
    for d in c.TRAIN_DEVS:
        print("held out", c.SHORT[d], "nearest order:", [c.SHORT[s] for s in nearest_order(d, c.TRAIN_DEVS)])
    for fam in c.FAMILIES:
        df = c.load(fam)
        for method in ["roofline", "nearest", "nearest_roof", "li"]:
            # log residuals of the baseline on each GPU's test rows (for conformal intervals)
            lres = {}
            preds = {}
            for d in c.TRAIN_DEVS:
                for split in ["test", "train"]:
                    rows = df[(df.dev == d) & (df.split == split)]
                    p = predict(method, df, rows, d, fam)
                    preds[(d, split)] = (p, rows.lat.to_numpy())
                    if split == "test":
                        ok = ~np.isnan(p)
                        lres[d] = np.log(rows.lat.to_numpy()[ok] / p[ok])
            for d in c.TRAIN_DEVS:
                pool = np.concatenate([lres[s] for s in c.TRAIN_DEVS if s != d])
                qlo, qhi = np.quantile(pool, [0.05, 0.95])
                for split in ["test", "train"]:
                    p, y = preds[(d, split)]
                    ok = ~np.isnan(p)
                    r = c.summarize(p[ok], y[ok], p[ok] * np.exp(qlo), p[ok] * np.exp(qhi))
                    r.update(method=method, held_out=c.SHORT[d], fam=fam, split=split,
                             missing=int((~ok).sum()))
                    res.append(r)
    out = pd.DataFrame(res)
    import os
    os.makedirs("/tmp/xdev/results", exist_ok=True)
    out.to_csv("/tmp/xdev/results/baselines.csv", index=False)
    pd.set_option("display.width", 200)
    for split in ["test", "train"]:
        t = out[out.split == split].pivot_table(index=["method", "held_out"], columns="fam",
                                                values="med").round(1)
        print(f"\nmedian APE (%), {split} rows\n", t[c.FAMILIES])
    t = out[out.split == "test"].pivot_table(index=["method", "held_out"], columns="fam",
                                             values="cov").round(0)
    print("\n90% interval coverage (%), test rows\n", t[c.FAMILIES])


if __name__ == "__main__":
    main()
