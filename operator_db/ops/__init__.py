"""Operator configurations → runnable ops with their inputs; their FLOPs and bytes."""

from operator_db.ops.build import BuiltOp, OperatorBuildError, allocate, build_op
from operator_db.ops.cost import OpCost, op_cost
from operator_db.ops.flops import COUNTER_RULES, FlopTally, Tally, counted_by_flop_counter
from operator_db.ops.resolve import UnknownOperatorError, resolve_function, resolve_module

__all__ = [
    "COUNTER_RULES",
    "BuiltOp",
    "FlopTally",
    "OpCost",
    "OperatorBuildError",
    "Tally",
    "UnknownOperatorError",
    "allocate",
    "build_op",
    "counted_by_flop_counter",
    "op_cost",
    "resolve_function",
    "resolve_module",
]
