"""The query layer: every read and small write of the store, as functions taking ``session``.

Each function takes the session first and its options by keyword, and never commits: the
boundary (one API request, one CLI command, one worker job) does. Estimates, the worker, the CLI
and the API all read through here; no other package builds SQL.
"""

from operator_db.db.queries.configs import (
    config_measurements,
    configs_by_ids,
    get_config,
    list_configs,
)
from operator_db.db.queries.counters import (
    CounterFigures,
    add_counters,
    config_counters,
    model_counters,
)
from operator_db.db.queries.devices import (
    check_device_kind_name,
    device_kinds,
    find_device_kind,
    get_device_kind,
    get_or_create_device_kind,
    get_or_create_host,
    host_cpu_label,
    kinds_measuring_model,
    list_hosts,
    sole_device_kind,
)
from operator_db.db.queries.models import (
    ConfigCost,
    ModelConfig,
    ModelOperatorRow,
    ModelSummary,
    config_ids_by_key,
    config_spec,
    delete_model,
    get_model,
    list_models,
    model_config_costs,
    model_configs,
    model_count,
    model_operators,
    model_summaries,
    models_configs,
)
from operator_db.db.queries.overview import (
    NewestResult,
    measurement_provenance,
    models_measured_per_kind,
    newest_measurements,
)
from operator_db.db.queries.peaks import PeakFigure, has_spec_peaks, peak_rows, replace_peaks
from operator_db.db.queries.predictors import (
    add_predictors,
    latest_predictors,
    list_predictors,
    next_predictor_version,
)
from operator_db.db.queries.results import (
    Aggregate,
    Figure,
    JobState,
    config_figures,
    has_model_run,
    measured_config_ids,
    model_config_figures,
    model_figures,
    model_job_states,
)
from operator_db.db.queries.tables import TABLES, row_counts

__all__ = [
    "NewestResult",
    "measurement_provenance",
    "models_measured_per_kind",
    "newest_measurements",
    "sole_device_kind",
    "host_cpu_label",
    "configs_by_ids",
    "add_predictors",
    "latest_predictors",
    "list_predictors",
    "next_predictor_version",
    "TABLES",
    "Aggregate",
    "ConfigCost",
    "CounterFigures",
    "Figure",
    "JobState",
    "ModelConfig",
    "ModelOperatorRow",
    "ModelSummary",
    "PeakFigure",
    "add_counters",
    "check_device_kind_name",
    "config_counters",
    "config_figures",
    "config_measurements",
    "config_ids_by_key",
    "config_spec",
    "delete_model",
    "device_kinds",
    "find_device_kind",
    "get_config",
    "get_device_kind",
    "get_model",
    "get_or_create_device_kind",
    "get_or_create_host",
    "has_model_run",
    "has_spec_peaks",
    "kinds_measuring_model",
    "list_configs",
    "list_hosts",
    "list_models",
    "measured_config_ids",
    "model_config_costs",
    "model_configs",
    "model_config_figures",
    "model_count",
    "model_counters",
    "model_figures",
    "model_job_states",
    "model_operators",
    "model_summaries",
    "models_configs",
    "peak_rows",
    "replace_peaks",
    "row_counts",
]
