"""Device-level efficiency offsets: a_d = median over GPU d's test rows of ln(t / base)
(base = FP32 compute time for bmm/linear, DRAM time for ew/ln/softmax), and how well each
zero-shot rule predicts a held-out GPU's a_d from the other four (leave-one-GPU-out).
Run: /work/main/.venv/bin/python offsets.py"""
import numpy as np, pandas as pd
import common as c, logo, features as F
pd.set_option("display.width", 200)
A = {}
for fam in c.FAMILIES:
    df = c.load(fam)
    b = "tc" if fam in ("bmm", "linear") else "tm"
    t = df[df.split == "test"]
    y = np.log(t.lat / logo.base_ms(t, b))
    A[fam] = y.groupby(t.dev).median()
A = pd.DataFrame(A)
print("exp(a_d): measured / base on large shapes\n", np.exp(A).rename(index=c.SHORT).round(3))

def feat(d):
    s = c.SPEC[d]
    return dict(arch=s["arch"], hbm=F.HBM[d], lbw=np.log(s["bw"]), lpeak=np.log(s["flops"]),
                lsms=np.log(s["sms"]), ll2=np.log(s["l2"]), tdp_tf=F.TDP_W[d] / s["flops"] * 1e12,
                clock=s["clock"], lcores=np.log(s["cores"]))
FT = pd.DataFrame({d: feat(d) for d in c.SHORT}).T
Z = (FT - FT.mean()) / FT.std()
rules = {
    "mean": None, "median": None,
    "knn(peak,bw,sms,l2)": ["lpeak", "lbw", "lsms", "ll2"],
    "knn(arch,hbm)": ["arch", "hbm"],
    "knn(arch,hbm,bw)": ["arch", "hbm", "lbw"],
    "knn(hbm,tdp/tf)": ["hbm", "tdp_tf"],
    "knn(arch,hbm,tdp/tf)": ["arch", "hbm", "tdp_tf"],
    "knn(all)": list(FT.columns),
    "kern(all)": list(FT.columns),
    "kern(arch,hbm,tdp/tf)": ["arch", "hbm", "tdp_tf"],
}
rows = []
for fam in c.FAMILIES:
    for r, cols in rules.items():
        for d in c.TRAIN_DEVS:
            oth = [s for s in c.TRAIN_DEVS if s != d]
            a = A.loc[oth, fam]
            if r == "mean": p = a.mean()
            elif r == "median": p = a.median()
            elif r.startswith("knn"):
                dist = ((Z.loc[oth, cols] - Z.loc[d, cols]) ** 2).sum(1)
                p = a[dist.idxmin()]
            else:
                dist = ((Z.loc[oth, cols] - Z.loc[d, cols]) ** 2).sum(1)
                w = np.exp(-dist / 2); p = (w * a).sum() / w.sum()
            rows.append(dict(fam=fam, rule=r, dev=c.SHORT[d], err=abs(np.exp(p - A.loc[d, fam]) - 1) * 100))
R = pd.DataFrame(rows)
print("\n|error| of the device-level factor, % (rows: rule; cols: held-out GPU), per family")
for fam in c.FAMILIES:
    t = R[R.fam == fam].pivot(index="rule", columns="dev", values="err")
    t["mean"] = t.mean(1); t["max"] = t.iloc[:, :5].max(1)
    print(fam); print(t.round(1).sort_values("mean"))
# which neighbour each rule picks for the held-out GPUs (spec sheets only)
for r, cols in rules.items():
    if not r.startswith("knn"): continue
    pick = {}
    for d in c.HELD_OUT:
        dist = ((Z.loc[c.TRAIN_DEVS, cols] - Z.loc[d, cols]) ** 2).sum(1)
        pick[c.SHORT[d]] = c.SHORT[dist.idxmin()]
    print(r, "nearest for held-out GPUs:", pick)
