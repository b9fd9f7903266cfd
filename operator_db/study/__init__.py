"""Studies: plan and run a matrix of models × batch sizes × modes, and analyse its runs.

``opdb study`` (``operator_db/cli/study.py``) plans the matrix from a named set (:mod:`.sets`)
and runs it (:mod:`.run`: harvested, stored and measured here, resumable, per-operator measurement
optional); :mod:`.analysis` reads what the database holds of such runs (batch size, complexity,
correlation, forward:backward, layers) for the report (``operator_db.report``). Nothing is imported
here: the analyses run without torch, the running needs it.
"""
