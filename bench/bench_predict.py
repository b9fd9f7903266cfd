"""The predictors on a filled database: training time and the leave-one-out figures (issue 15).

    .venv/bin/python bench/bench_predict.py --db sqlite:///predict.sqlite [--device-kind K]

The database holds what `opdb sweep` (measured with `--no-model-run`), `opdb study --operators`
and `opdb measure` of the shipped specs stored on one device kind (docs/predict.md says how it was
filled). The benchmark trains the kind's predictor once (timed, and stored as its next version,
as `opdb predict train` does) and runs `opdb predict evaluate`'s evaluation holding out each model,
then each family of models, and prints the figures with the issue's targets: whole-model median
|error| ≤ 10 % (aim ≤ 5 %), per-configuration median ≤ 15 %, 90 % intervals holding the measured
value for 85–95 % of configurations.
"""

from __future__ import annotations

import argparse
import json
import time

from operator_db.db import queries
from operator_db.db.store import Store
from operator_db.errors import NotFoundError
from operator_db.predict.evaluate import evaluate
from operator_db.predict.store import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="Database URL.")
    parser.add_argument("--device-kind", help="Device kind (default: the only one).")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args()
    with Store.open(args.db) as store:
        try:
            with store.transaction(read_only=True) as session:
                kind = queries.sole_device_kind(session, args.device_kind)
        except NotFoundError as exc:
            parser.error(str(exc))
        started = time.perf_counter()
        with store.transaction() as session:
            predictor = train(session, kind)
        train_s = time.perf_counter() - started
        figures: dict[str, object] = {
            "device_kind": kind,
            "configurations": predictor.samples,
            "train_s": round(train_s, 2),
        }
        with store.transaction(read_only=True) as session:
            for hold_out in ("model", "family"):
                result = evaluate(session, kind, hold_out=hold_out)  # type: ignore[arg-type]
                figures[hold_out] = result.summary()
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(
        f"{kind}: {figures['configurations']} measured configurations, "
        f"training {figures['train_s']} s"
    )
    for hold_out in ("model", "family"):
        s = figures[hold_out]
        assert isinstance(s, dict)
        print(
            f"leave one {hold_out} out ({s['groups']} held out, {s['seconds']:.0f} s): "
            f"whole model median |error| {s['model_median_error']:.1%} (target ≤ 10 %; measured "
            f"estimate {s['measured_estimate_median_error']:.1%}; Σ operators predicted against "
            f"Σ measured {s['operators_median_error']:.1%}), per configuration "
            f"{s['config_median_error']:.1%} (≤ 15 %), 90 % intervals hold "
            f"{s['interval_coverage']:.1%} of configurations (85–95 %), the full run for "
            f"{s['model_interval_coverage']:.1%} of models"
        )


if __name__ == "__main__":
    main()
