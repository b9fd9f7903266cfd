"""What the database holds: the tables and their row counts."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from operator_db.db import models as m
from operator_db.db.llm_tables import GenerationRun, Llm, LlmStep
from operator_db.db.predictor_tables import CrossPredictor, Predictor
from operator_db.db.session_tables import UiSession

TABLES: tuple[type[m.Base], ...] = (
    m.Model,
    m.OperatorConfig,
    m.ModelOperator,
    m.DeviceKind,
    m.Host,
    m.Job,
    m.Measurement,
    m.FullModelRun,
    m.DevicePeak,
    m.NcuCounter,
    Predictor,
    m.DataSource,
    CrossPredictor,
    Llm,
    LlmStep,
    GenerationRun,
    UiSession,
)


def row_counts(session: Session) -> dict[str, int]:
    """Return the number of rows in each table, by table name."""
    return {
        table.__tablename__: session.scalar(select(func.count()).select_from(table)) or 0
        for table in TABLES
    }
