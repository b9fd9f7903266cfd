"""The report's LLM section: each stored LLM's generation against its measured ``generate()`` runs.

One row per LLM, device kind and (batch, prompt, new tokens) with measured runs, as ``opdb llm
estimate`` composes it (docs/llm.md): TTFT, TPOT and the total against the runs, each error with
its interval and verdict, tokens/s, J/token where energy is measured, and the decode roofline's
share attained.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.errors import OperatorDBError
from operator_db.llm.compose import GenerationEstimate
from operator_db.llm.estimate import measured_table
from operator_db.report.document import (
    Columns,
    Document,
    display,
    fixed,
    integer,
    num,
    percent,
    text,
)
from operator_db.stats import Interval, noise_verdict

LLM_COLUMNS = [
    "llm",
    "device_kind",
    "batch",
    "prompt",
    "new_tokens",
    "ttft_s",
    "ttft_run_s",
    "ttft_error",
    "tpot_s",
    "tpot_run_s",
    "tpot_error",
    "total_error",
    "error_verdicts",
    "tokens_per_s",
    "joules_per_token",
    "joules_per_token_run",
    "energy_error",
    "bound_share",
]
LLM_DISPLAY: Columns = [
    ("llm", "LLM", text),
    ("device_kind", "device kind", text),
    ("batch", "batch", integer),
    ("prompt", "prompt", integer),
    ("new_tokens", "new", integer),
    ("ttft_s", "TTFT (ms)", num(1e3)),
    ("ttft_run_s", "TTFT run (ms)", num(1e3)),
    ("ttft_error", "TTFT error", fixed(1, " %")),
    ("tpot_s", "TPOT (ms)", num(1e3)),
    ("tpot_run_s", "TPOT run (ms)", num(1e3)),
    ("tpot_error", "TPOT error", fixed(1, " %")),
    ("total_error", "total error", fixed(1, " %")),
    ("error_verdicts", "TTFT / TPOT / total", text),
    ("tokens_per_s", "tokens/s", num(1, 4)),
    ("joules_per_token", "J/token", num(1, 3)),
    ("joules_per_token_run", "J/token run", num(1, 3)),
    ("energy_error", "energy error", fixed(1, " %")),
    ("bound_share", "of the decode bound", percent),
]


def _value(x: Interval | None) -> float | None:
    return None if x is None else x.value


def _row(e: GenerationEstimate) -> dict[str, Any]:
    ref, errors = e.reference, e.errors()
    verdicts = [
        "≈" if noise_verdict(errors[k]) == "within noise" else "≠" if k in errors else "–"
        for k in ("ttft", "tpot", "total")
    ]
    pct = {
        k: errors[k].value * 100 if k in errors else None
        for k in ("ttft", "tpot", "total", "energy")
    }
    return {
        "llm": e.llm,
        "device_kind": e.device_kind,
        "batch": e.batch,
        "prompt": e.prompt,
        "new_tokens": e.new_tokens,
        "ttft_s": _value(e.ttft),
        "ttft_run_s": _value(ref.ttft if ref else None),
        "ttft_error": pct["ttft"],
        "tpot_s": _value(e.tpot),
        "tpot_run_s": _value(ref.tpot if ref else None),
        "tpot_error": pct["tpot"],
        "total_error": pct["total"],
        "error_verdicts": " / ".join(verdicts),
        "tokens_per_s": e.tokens_per_s,
        "joules_per_token": _value(e.joules_per_token),
        "joules_per_token_run": e.reference_joules_per_token,
        "energy_error": pct["energy"],
        "bound_share": e.bound_share,
    }


def llm_table(session: Session, kinds: Sequence[str] | None = None) -> pd.DataFrame:
    """Return every stored LLM's measured points, composed (``LLM_COLUMNS``), on ``kinds``."""
    rows = []
    for llm in queries.list_llms(session):
        for kind in queries.kinds_with_llm(session, llm.id):
            if kinds is not None and kind.name not in kinds:
                continue
            try:
                found = measured_table(session, llm.name, kind.name)
            except OperatorDBError:
                continue
            rows += [_row(e) for e in found]
    return pd.DataFrame(rows, columns=LLM_COLUMNS)


def llm_section(doc: Document, table: pd.DataFrame) -> None:
    """Write the LLMs' generations against their measured ``generate()`` runs."""
    doc.heading("LLMs: time per token against generate()")
    if table.empty:
        doc.para("No LLM has measured generate() runs on these device kinds (opdb llm run).")
        return
    doc.para(
        "Each causal LM as `opdb llm estimate` composes it (docs/llm.md): the prefill and the "
        "decode steps as step models composed from their operators, plus the time generate() "
        "spends between forwards in its runs; against greedy `generate()` runs of the same "
        "batch, prompt and new tokens. Errors are the estimate's against the runs; ≈ within "
        "noise (the 95 % interval of the error holds 0), ≠ beyond. *Of the decode bound*: "
        "(weights + KV cache bytes) / bandwidth over the composed TPOT."
    )
    doc.table(display(table, LLM_DISPLAY))
