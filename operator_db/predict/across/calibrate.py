"""The calibration of a new GPU: the configurations to measure, stored as one model to measure.

``opdb predict across calibrate`` on a host of a GPU the database has not seen stores the
cross-device model's calibration configurations (``fewshot.design``: 50, a few per family) as the
model ``opdb-calibration`` through the one ingest path, then measures it there like any model.
Once measured, every prediction on that GPU is few-shot (``train.Across.predict``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.ingest import ingest_spec
from operator_db.errors import InvalidInputError
from operator_db.predict.across.store import require
from operator_db.specs.io import parse_spec

CALIBRATION_MODEL = "opdb-calibration"


def calibration_spec(session: Session) -> dict[str, Any]:
    """Return the spec (as data) of the newest cross-device model's calibration configurations.

    Raises:
        NotFoundError: no cross-device model was trained.
        InvalidInputError: it has no calibration configurations.
    """
    across, row = require(session)
    keys = [k for family in sorted(across.calibration) for k in across.calibration[family]]
    ids = queries.config_ids_by_key(session, keys)
    configs = queries.configs_by_ids(session, [ids[k] for k in keys if k in ids])
    if not configs:
        raise InvalidInputError("the cross-device model has no calibration configurations")
    operators = []
    for config in sorted(configs, key=lambda c: c.key):
        op = queries.config_spec(config).model_dump(mode="json", exclude_none=True)
        op.update(
            count=1,
            flops=config.flops,
            flop_rule=config.flop_rule,
            bytes=config.bytes,
            params=config.params,
        )
        operators.append({k: v for k, v in op.items() if v is not None})
    return {
        "spec_version": 3,
        "model": {
            "name": CALIBRATION_MODEL,
            "mode": "inference",
            "dtype": "float32",
            "description": (
                f"The {len(operators)} configurations the cross-device model v{row.version} "
                "calibrates a new GPU on (a few per operator family, spread over the shapes the "
                "training GPUs share): measured on a GPU, they make its predictions few-shot."
            ),
        },
        "operators": operators,
    }


def store_calibration(session: Session) -> int:
    """Store (or update) the calibration model; return its number of configurations."""
    loaded = parse_spec(calibration_spec(session), CALIBRATION_MODEL)
    ingest_spec(session, loaded)
    return len(loaded.keys)
