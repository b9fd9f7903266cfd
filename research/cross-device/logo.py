"""Leave-one-GPU-out harness over the five training GPUs.

For each held-out GPU d and family: fit on the four other GPUs' training AND test rows, predict
d's test rows and d's training rows. Predictions are ln(latency / roofline on d's spec sheet).
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor

import common as c
import features as F

GBT = dict(max_iter=300, learning_rate=0.08, max_leaf_nodes=31, min_samples_leaf=40,
           l2_regularization=1.0)


def gbt_fit(X, y, w, loss="squared_error", **kw):
    p = dict(GBT)
    p.update(kw)
    cat = [X.columns.get_loc("op")] if "op" in X.columns else None
    m = HistGradientBoostingRegressor(loss=loss, categorical_features=cat, random_state=0, **p)
    m.fit(X.to_numpy(), y, sample_weight=w)
    return m


def weights(df, test_weight):
    """Each GPU's test rows together weigh test_weight x its training rows together."""
    w = np.ones(len(df))
    for d in df.dev.unique():
        tr = (df.dev == d) & (df.split == "train")
        te = (df.dev == d) & (df.split == "test")
        if te.sum():
            w[te.to_numpy()] = test_weight * tr.sum() / te.sum()
    return w / w.mean()


class GBTModel:
    def __init__(self, fset="rel", test_weight=1.0, loss="squared_error", **kw):
        self.fset, self.tw, self.loss, self.kw = fset, test_weight, loss, kw

    def fit(self, df):
        X = F.features(df, self.fset)
        self.cols = list(X.columns)
        self.m = gbt_fit(X, F.target(df), weights(df, self.tw), self.loss, **self.kw)
        return self

    def predict(self, df):
        return self.m.predict(F.features(df, self.fset)[self.cols].to_numpy())


def subsample(df, cap, seed=0):
    """Keep at most `cap` training-split rows per GPU (all test-split rows)."""
    if not cap:
        return df
    parts = [df[df.split == "test"]]
    for d, g in df[df.split == "train"].groupby("dev"):
        parts.append(g.sample(min(cap, len(g)), random_state=seed))
    return pd.concat(parts).sort_index()


def logo(fam, make_model, devs=None, verbose=True, cap=4000):
    """Returns a frame of held-out predictions: dev, split, y (true ln ratio), p (pred)."""
    df = c.load(fam)
    out = []
    for d in devs or c.TRAIN_DEVS:
        t0 = time.time()
        tr = subsample(df[df.dev != d], cap)
        m = make_model().fit(tr)
        ho = df[df.dev == d]
        p = m.predict(ho)
        out.append(pd.DataFrame({"dev": c.SHORT[d], "split": ho.split.to_numpy(),
                                 "y": F.target(ho), "p": p, "lat": ho.lat.to_numpy(),
                                 "idx": ho.index.to_numpy()}))
        if verbose:
            print(f"  {fam} held-out {c.SHORT[d]}: fit {time.time() - t0:.1f}s", flush=True)
    return pd.concat(out, ignore_index=True)


def score(pred: pd.DataFrame, conformal="outer") -> pd.DataFrame:
    """Median/mean APE and 90 % split-conformal coverage per held-out GPU and split.
    Interval of GPU d: 5 %/95 % quantiles of (y - p) on the OTHER GPUs' held-out test rows."""
    rows = []
    res = pred.assign(r=pred.y - pred.p)
    for d in res.dev.unique():
        pool = res[(res.dev != d) & (res.split == "test")].r
        qlo, qhi = np.quantile(pool, [0.05, 0.95])
        for s in ["test", "train"]:
            x = res[(res.dev == d) & (res.split == s)]
            e = np.abs(np.exp(x.p - x.y) - 1) * 100
            cov = ((x.r >= qlo) & (x.r <= qhi)).mean() * 100
            rows.append(dict(held_out=d, split=s, n=len(x), med=np.median(e), mean=np.mean(e),
                             cov=cov, width=np.exp(qhi - qlo)))
    return pd.DataFrame(rows)


def base_ms(df, kind):
    fl, by = c.work(df)
    if kind == "roof":
        return c.roofline_s(df)
    if kind == "tc":
        return fl / c.devcol(df, "flops") * 1e3
    if kind == "tm":
        return by / c.devcol(df, "bw") * 1e3
    raise ValueError(kind)


def dev_facts(d):
    """Spec-sheet facts of a GPU used to find its nearest training GPU."""
    s = c.SPEC[d]
    return dict(lpeak=np.log(s["flops"]), lbw=np.log(s["bw"]), lsms=np.log(s["sms"]),
                ll2=np.log(s["l2"]), arch=s["arch"], hbm=F.HBM[d],
                tdp_tf=F.TDP_W[d] / (s["flops"] / 1e12))


_FACTS = pd.DataFrame({d: dev_facts(d) for d in c.SHORT}).T
_Z = (_FACTS - _FACTS.mean()) / _FACTS.std()


def spec_dist(d, others, keys):
    keys = list(keys)
    return {s: float(np.sqrt(((_Z.loc[s, keys] - _Z.loc[d, keys]) ** 2).sum())) for s in others}


class OffsetModel:
    """ln(t / base) = a_device + g(features).  base: FP32 compute time ('tc'), DRAM time ('tm')
    or the roofline ('roof').  a_device of a training GPU: median over its large-shape (test
    split) rows of y - g; g: a GBT on shape and device-relative features fitted on y - a.
    A GPU without measurements gets a from the training GPUs' a by `offset`: 'mean', 'median',
    'knn' (the nearest GPU in the standardized spec facts `keys`) or 'kern' (Gaussian weights)."""

    def __init__(self, fset="rel", base="roof", offset="mean", keys=("arch", "hbm", "tdp_tf"),
                 test_weight=1.0, loss="squared_error", **kw):
        self.fset, self.base, self.offset, self.keys = fset, base, offset, keys
        self.tw, self.loss, self.kw = test_weight, loss, kw

    def y(self, df):
        return np.log(df.lat.to_numpy() / base_ms(df, self.base))

    def fit(self, df):
        X = F.features(df, self.fset)
        self.cols = list(X.columns)
        y = self.y(df)
        w = weights(df, self.tw)
        devs = df.dev.to_numpy()
        big = (df.split == "test").to_numpy()
        a = {d: np.median(y[(devs == d) & big]) for d in np.unique(devs)}
        av = np.array([a[d] for d in devs])
        self.m = gbt_fit(X, y - av, w, self.loss, **self.kw)
        g = self.m.predict(X.to_numpy())
        self.a = {d: a[d] + np.median((y - av - g)[(devs == d) & big]) for d in a}
        return self

    def dev_offset(self, d):
        if d in self.a:
            return self.a[d]
        v = np.array(list(self.a.values()))
        if self.offset == "mean":
            return float(v.mean())
        if self.offset == "median":
            return float(np.median(v))
        dist = spec_dist(d, list(self.a), self.keys)
        if self.offset == "knn":
            return self.a[min(dist, key=dist.get)]
        if self.offset == "kern":
            w = {s: np.exp(-dist[s] ** 2 / 2) for s in dist}
            return sum(w[s] * self.a[s] for s in w) / sum(w.values())
        raise ValueError(self.offset)

    def predict(self, df, offsets=None):
        """ln(t / roofline), comparable with features.target.  offsets: {dev: a} overrides."""
        g = self.m.predict(F.features(df, self.fset)[self.cols].to_numpy())
        off = {d: (offsets or {}).get(d, self.dev_offset(d)) for d in df.dev.unique()}
        a = df.dev.map(off).to_numpy()
        return g + a + np.log(base_ms(df, self.base) / c.roofline_s(df))
