"""``opdb doctor``: check a host before it measures.

Each check returns data (a :class:`Check`); the report's exit code is 1 where measuring here would
give wrong numbers (docs/doctor.md).
"""

from operator_db.doctor.energy import Workload
from operator_db.doctor.report import Check, DoctorReport, Status
from operator_db.doctor.run import DoctorOptions, device_checks, run_doctor

__all__ = [
    "Check",
    "DoctorOptions",
    "DoctorReport",
    "Status",
    "Workload",
    "device_checks",
    "run_doctor",
]
