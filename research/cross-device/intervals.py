"""Zero-shot interval rules chosen by leaving each training GPU out, nested (issue 45).

Fits the cross-device model on NeuSight's five training GPUs only (``fit_across`` with its
leave-one-GPU-out folds), keeps each fold's zero-shot ln residuals (each GPU predicted by the
model of the other four, by the view chosen on the other folds), and scores interval rules:
for each training GPU, the half-width a rule takes from the *other* GPUs' folds, and the share
of that GPU's residuals it covers, per family and pooled over the GPU's rows. The target is
85–95 % on every GPU. The held-out GPUs (L4, A100 80 GB) are not read. Usage::

    python research/cross-device/intervals.py --db sqlite:///neusight.sqlite [--cache F]
"""

from __future__ import annotations

import argparse
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np

HELD_OUT = ("NVIDIA L4", "NVIDIA A100 80GB PCIe")


def residuals(url: str) -> dict[str, dict[str, np.ndarray]]:
    """Return family → training GPU → zero-shot ln residuals of its fold."""
    from operator_db.db.store import Store
    from operator_db.predict.across.model import target_ln
    from operator_db.predict.across.store import evaluation_frame
    from operator_db.predict.across.train import fit_across

    with Store.open(url) as store, store.transaction(read_only=True) as session:
        frame, facts = evaluation_frame(session)
    train = {k: f for k, f in facts.items() if k not in HELD_OUT}
    frame = frame[frame["kind"].isin(list(train))]
    across = fit_across(frame, train, keep_folds=True, progress=print)
    out: dict[str, dict[str, np.ndarray]] = {}
    for f in across.folds:
        res = target_ln(f.scored) - f.scored["zero"].to_numpy(np.float64)
        out.setdefault(f.family, {})[f.kind] = res[np.isfinite(res)]
    return out


Rule = Callable[[list[np.ndarray]], float]


def rules() -> dict[str, Rule]:
    """Half-width rules over the other GPUs' residual arrays."""
    q = lambda r, p: float(np.quantile(np.abs(r), p))  # noqa: E731
    out: dict[str, Rule] = {
        "max of GPUs' q90 (today)": lambda o: max(q(r, 0.9) for r in o),
        "max of GPUs' q80": lambda o: max(q(r, 0.8) for r in o),
        "median of GPUs' q90": lambda o: float(np.median([q(r, 0.9) for r in o])),
        "mean of GPUs' q90": lambda o: float(np.mean([q(r, 0.9) for r in o])),
        "pooled q90": lambda o: q(np.concatenate(o), 0.9),
        "pooled q95": lambda o: q(np.concatenate(o), 0.95),
        "GPU-weighted q90": lambda o: _weighted(o, 0.9),
        "GPU-weighted q95": lambda o: _weighted(o, 0.95),
    }
    return out


def _weighted(o: list[np.ndarray], p: float) -> float:
    """The p quantile of |residual| with every GPU weighing the same, however many rows."""
    v = np.concatenate([np.abs(r) for r in o])
    w = np.concatenate([np.full(len(r), 1.0 / len(r)) for r in o])
    order = np.argsort(v)
    cum = np.cumsum(w[order]) / w.sum()
    return float(v[order][np.searchsorted(cum, p)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--cache", default="/tmp/xdev/intervals.pkl")
    args = parser.parse_args()
    cache = Path(args.cache)
    if cache.is_file():
        res = pickle.loads(cache.read_bytes())
    else:
        res = residuals(args.db)
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_bytes(pickle.dumps(res))
    gpus = sorted({g for fam in res.values() for g in fam})
    short = {g: g.replace("NVIDIA ", "").replace("Tesla ", "")[:9] for g in gpus}
    print("pooled coverage % per held-out training GPU (its families' rows together); "
          "family folds below 85 / above 95; mean |coverage − 90|")
    print(f"{'rule':28s} " + " ".join(f"{short[g]:>9s}" for g in gpus) + "  <85 >95  |c-90|")
    for name, rule in rules().items():
        cells, below, above, dev = [], 0, 0, []
        for g in gpus:
            hit = n = 0
            for fam, per in res.items():
                if g not in per or len(per) < 3:
                    continue
                others = [r for k, r in per.items() if k != g and len(r)]
                half = rule(others)
                c = np.abs(per[g]) <= half
                cov = float(c.mean()) * 100
                below += cov < 85
                above += cov > 95
                hit += int(c.sum())
                n += len(c)
            pooled = 100 * hit / n if n else float("nan")
            dev.append(abs(pooled - 90))
            cells.append(f"{pooled:9.1f}")
        print(f"{name:28s} " + " ".join(cells) + f"  {below:3d} {above:3d}  {np.mean(dev):5.1f}")


if __name__ == "__main__":
    main()
