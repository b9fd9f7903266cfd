"""Measuring commands start again with glibc's allocator set from the process's start.

``measure/allocator.py`` sets glibc's allocator with ``mallopt`` once the worker starts; this
module (light: imported by the ``opdb`` entry point before anything heavy) runs a measuring
command again at once with the same settings in its environment, read by glibc at start, and
with glibc's heap on transparent huge pages (:data:`HUGE_PAGES`), which only a start can set.
"""

from __future__ import annotations

MEASURING_COMMANDS = frozenset({"demo", "measure", "worker", "study", "doctor"})
"""The ``opdb`` commands that measure in their own process (``doctor`` checks what they get)."""
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

HUGE_PAGES = "glibc.malloc.hugetlb=1"
"""glibc's tunable (glibc 2.35 and newer) that puts its heap on transparent huge pages (madvise).

On a 2-vCPU VM (2026-12-07, AMD EPYC Zen 4, ResNet-50 b1's interleaved job, one process each)
the replay of the model's calls composed from 4 % below to 14 % above the model, by process:
every replay of a process (the same calls again, or over the model's own modules) alike, so
what differs is the process's memory, not the replay. With the heap on 2 MiB pages, processes
alternating with and without: +1.9, +4.7, −0.7, −1.2, +4.8 % against +7.4, +10.2, +5.4, −1.3,
+5.7 %; in all, 12 of 21 processes within ±3 % with huge pages (−3.5 … +13.3 %), 5 of 16
without (−3.1 … +14.4 %): better, not solved (docs/measurement.md, "Which process"). Older
glibc ignores the tunable, and a kernel whose THP mode is ``never`` gives no huge pages."""


def _off(environ: dict[str, str], name: str) -> bool:
    """Whether the setting ``OPDB_MEASURE__<name>`` is turned off in ``environ``."""
    return environ.get(f"OPDB_MEASURE__{name}", "").lower() in ("0", "false", "no")


def _huge_pages(environ: dict[str, str]) -> bool:
    """Whether ``environ`` asks glibc for huge pages (or the user set the tunable themselves)."""
    return "glibc.malloc.hugetlb" in environ.get("GLIBC_TUNABLES", "")


def process_start_env(environ: dict[str, str]) -> dict[str, str]:
    """Return ``environ`` with what a measuring process wants from its start added.

    :data:`PROCESS_START_ENV` where the user has not set its variables, and :data:`HUGE_PAGES`
    added to the user's other ``GLIBC_TUNABLES`` (unless ``OPDB_MEASURE__HUGE_PAGES`` is off or
    the user set ``glibc.malloc.hugetlb`` themselves).
    """
    env = {**PROCESS_START_ENV, **environ}
    if not _off(environ, "HUGE_PAGES") and not _huge_pages(environ):
        tunables = environ.get("GLIBC_TUNABLES", "")
        env["GLIBC_TUNABLES"] = f"{tunables}:{HUGE_PAGES}" if tunables else HUGE_PAGES
    return env


def _wanted(environ: dict[str, str]) -> bool:
    """Whether a process with ``environ`` should start again with :func:`process_start_env`.

    On Linux, with ``OPDB_MEASURE__RETAIN_FREED_MEMORY`` not turned off, lacking any of
    :data:`PROCESS_START_ENV` or (unless ``OPDB_MEASURE__HUGE_PAGES`` is off) :data:`HUGE_PAGES`.
    """
    import sys

    if not sys.platform.startswith("linux") or _off(environ, "RETAIN_FREED_MEMORY"):
        return False
    missing = not all(k in environ for k in PROCESS_START_ENV)
    return missing or (not _off(environ, "HUGE_PAGES") and not _huge_pages(environ))


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
    return process_start_env(environ) if _wanted(environ) else None


def ensure_start_env() -> None:
    """Run this Python program again with :data:`PROCESS_START_ENV` where :func:`_wanted` says so.

    For the benchmarks that measure in their own process (``bench/bench_repeat.py``,
    ``bench/bench_estimate.py``), so that they measure as ``opdb measure`` does.
    """
    import os
    import sys

    if _wanted(dict(os.environ)):
        os.execve(sys.executable, [sys.executable, *sys.argv], process_start_env(dict(os.environ)))


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
