"""Model → operator configurations: hooks on leaf modules, functional-call capture, model refs."""

from operator_db.harvest.core import harvest, load_reference
from operator_db.harvest.inputs import ModelInputs, parse_batch_sizes, parse_input, with_batch
from operator_db.harvest.refs import ModelRef, load_model, parse_overrides, parse_reference
from operator_db.harvest.result import HarvestResult, OpaqueOp, SkippedCall, TracedLeaf

harvest_model = harvest
"""The same function, for modules that have a ``harvest`` of their own (the CLI command)."""

__all__ = [
    "HarvestResult",
    "ModelInputs",
    "ModelRef",
    "OpaqueOp",
    "SkippedCall",
    "TracedLeaf",
    "harvest",
    "harvest_model",
    "load_model",
    "load_reference",
    "parse_batch_sizes",
    "parse_input",
    "parse_overrides",
    "parse_reference",
    "with_batch",
]
