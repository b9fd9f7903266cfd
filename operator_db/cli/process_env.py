"""Measuring commands start again with glibc's allocator set from the process's start.

``measure/allocator.py`` sets glibc's allocator with ``mallopt`` once the worker starts; this
module (light: imported by the ``opdb`` entry point before anything heavy) runs a measuring
command again at once with the same settings in its environment, read by glibc at start.
"""

from __future__ import annotations

MEASURING_COMMANDS = frozenset({"demo", "measure", "worker", "study"})
"""The ``opdb`` commands that measure in their own process."""
MEASURING_SUBCOMMANDS = frozenset({("llm", "measure"), ("llm", "run")})
"""The ``opdb`` group commands that measure in their own process."""
PROCESS_START_ENV = {"MALLOC_TRIM_THRESHOLD_": str(16 * 2**30), "MALLOC_TOP_PAD_": str(2**28)}
"""glibc's allocator settings read at a process's start: keep freed memory (16 GiB before any is
given back; 256 MiB more asked of the kernel at each growth).

``measure.allocator.retain_freed_memory`` keeps freed memory too (``mallopt``: trim threshold
1 GiB, top pad 64 MiB), but only once the worker starts, too late for the first model a process
measures: on the 2-vCPU VM of 2026-11-26 (ResNet-50 b1, the
first of ten repeats in a process) that one composed +5.9, +6.8 and +7.2 % above its run in
three runs where the later repeats lay within −1.2 … +2.2 %; with these set from the start, the
first repeat gave +0.3, −0.0 and +0.2 % (three processes). Why the start matters is not known:
the heap the process built before the worker started is the difference."""


def _wanted(environ: dict[str, str]) -> bool:
    """Whether a process with ``environ`` should start again with :data:`PROCESS_START_ENV`.

    On Linux, lacking any of it, with ``OPDB_MEASURE__RETAIN_FREED_MEMORY`` not turned off.
    """
    import sys

    if not sys.platform.startswith("linux") or all(k in environ for k in PROCESS_START_ENV):
        return False
    return environ.get("OPDB_MEASURE__RETAIN_FREED_MEMORY", "").lower() not in ("0", "false", "no")


def start_env(argv: list[str], environ: dict[str, str]) -> dict[str, str] | None:
    """Return the environment to run ``argv`` (an ``opdb`` command line) in again, or None.

    Only for a command of :data:`MEASURING_COMMANDS` (or :data:`MEASURING_SUBCOMMANDS`) started
    from a file (the ``opdb`` script,
    ``python -m operator_db``) where :func:`_wanted` says so.
    """
    import os

    measuring = len(argv) >= 2 and (
        argv[1] in MEASURING_COMMANDS or tuple(argv[1:3]) in MEASURING_SUBCOMMANDS
    )
    if not measuring or not os.path.isfile(argv[0]):
        return None
    return {**PROCESS_START_ENV, **environ} if _wanted(environ) else None


def ensure_start_env() -> None:
    """Run this Python program again with :data:`PROCESS_START_ENV` where :func:`_wanted` says so.

    For the benchmarks that measure in their own process (``bench/bench_repeat.py``,
    ``bench/bench_estimate.py``), so that they measure as ``opdb measure`` does.
    """
    import os
    import sys

    if _wanted(dict(os.environ)):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**PROCESS_START_ENV, **os.environ})


def stop_while_starting(argv: list[str]) -> None:
    """Let ``opdb worker`` exit 0 on a SIGTERM that comes while it starts.

    The worker's own handler (finish the job, then stop) is set once its device is open; before
    that (seconds: importing torch) SIGTERM's default ended the process with -15 although it held
    no job, which a supervisor reads as a crash (issue 46's chaos run: a worker restarted after a
    SIGKILL and stopped at once).
    """
    import signal
    import sys

    def stopped(_signum: int, _frame: object) -> None:
        sys.exit(0)  # nothing claimed yet: a stop, not a failure

    if len(argv) >= 2 and argv[1] == "worker":
        signal.signal(signal.SIGTERM, stopped)
