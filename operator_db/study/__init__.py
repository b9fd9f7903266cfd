"""Studies in one command: models × batch sizes × modes harvested, stored, measured whole.

``opdb study`` (``operator_db/cli/study.py``) plans the matrix from a named set
(:mod:`.sets`), runs it (:mod:`.run`: resumable, per-operator measurement optional) and writes
the report (``operator_db.estimate.report``) over the study's models.
"""

from operator_db.study.run import (
    ItemOutcome,
    StudyItem,
    StudyResult,
    harvest_item,
    measure,
    plan,
    prepare,
    run_study,
)
from operator_db.study.sets import SETS, StudyModel, StudySet, get_set

__all__ = [
    "SETS",
    "ItemOutcome",
    "StudyItem",
    "StudyModel",
    "StudyResult",
    "StudySet",
    "get_set",
    "harvest_item",
    "measure",
    "plan",
    "prepare",
    "run_study",
]
