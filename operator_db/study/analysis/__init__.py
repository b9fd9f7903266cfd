"""Studies over whatever the database holds: runs, batch size, complexity, correlation, layers.

Every function takes ``session``, only reads, and returns pandas DataFrames (or a small dataclass
of them). Units are in the column names: ``_s`` seconds, ``_j`` joules, ``_per_s`` per second,
``flops`` FLOPs (never MACs), ``params`` parameter elements.

Measured figures are the *latest eager* result per (target, device kind), as in
:func:`operator_db.estimate.compose.estimate_model`: a full-model run gives a model's latency, an
operator measurement gives a configuration's per-call time. Nothing missing is invented: a value
that was not measured is NaN, and the notes of each study say what was left out and why.
"""

from operator_db.study.analysis.backward import (
    FB_CONFIG_COLUMNS,
    FB_MODEL_COLUMNS,
    RUN_FB_COLUMNS,
    ForwardBackwardStudy,
    RunForwardBackward,
    forward_backward,
    inference_twins,
    run_forward_backward,
)
from operator_db.study.analysis.correlation import (
    CORRELATION_COLUMNS,
    MIN_PAIRS,
    CorrelationStudy,
    correlation_study,
    spearman,
    spearman_matrix,
)
from operator_db.study.analysis.layers import (
    MEASURED_MIN_COVERAGE,
    OTHER_BELOW,
    SHARE_COLUMNS,
    LayerStudy,
    layer_costs,
    layer_study,
    op_type,
)
from operator_db.study.analysis.matrix import (
    COMPLEXITY_TABLE_COLUMNS,
    RUN_COLUMNS,
    RUN_STATUSES,
    complexity_table,
    run_matrix,
)
from operator_db.study.analysis.models import (
    BATCH_COLUMNS,
    COMPLEXITY_COLUMNS,
    MODEL_COLUMNS,
    batch_study,
    family_label,
    family_names,
    latency_vs_complexity,
    model_table,
    reference_text,
)

__all__ = [
    "BATCH_COLUMNS",
    "COMPLEXITY_COLUMNS",
    "COMPLEXITY_TABLE_COLUMNS",
    "CORRELATION_COLUMNS",
    "FB_CONFIG_COLUMNS",
    "FB_MODEL_COLUMNS",
    "MEASURED_MIN_COVERAGE",
    "MIN_PAIRS",
    "MODEL_COLUMNS",
    "OTHER_BELOW",
    "RUN_COLUMNS",
    "RUN_FB_COLUMNS",
    "RUN_STATUSES",
    "SHARE_COLUMNS",
    "CorrelationStudy",
    "ForwardBackwardStudy",
    "LayerStudy",
    "RunForwardBackward",
    "batch_study",
    "complexity_table",
    "correlation_study",
    "family_label",
    "family_names",
    "forward_backward",
    "inference_twins",
    "latency_vs_complexity",
    "layer_costs",
    "layer_study",
    "model_table",
    "op_type",
    "reference_text",
    "run_forward_backward",
    "run_matrix",
    "spearman",
    "spearman_matrix",
]
