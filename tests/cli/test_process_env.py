"""A measuring command starts again with glibc's allocator set from the process's start."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from operator_db.cli.process_env import HUGE_PAGES, PROCESS_START_ENV, start_env

SCRIPT = str(Path(sys.executable).parent / "opdb")


def test_only_measuring_commands_started_from_a_file_without_the_settings() -> None:
    env = start_env([SCRIPT, "measure", "m"], {"PATH": "/bin"})
    assert env is not None and env["PATH"] == "/bin"
    assert all(env[k] == v for k, v in PROCESS_START_ENV.items())
    assert env["GLIBC_TUNABLES"] == HUGE_PAGES
    assert start_env([SCRIPT, "models", "list"], {}) is None  # does not measure
    assert start_env([SCRIPT, "doctor"], {}) is not None  # checks what measuring commands get
    assert start_env(["opdb", "measure", "m"], {}) is None  # not a file: an embedding program
    set_already = {**PROCESS_START_ENV, "GLIBC_TUNABLES": HUGE_PAGES}
    assert start_env([SCRIPT, "worker"], set_already) is None
    off = {"OPDB_MEASURE__RETAIN_FREED_MEMORY": "false"}
    assert start_env([SCRIPT, "demo"], off) is None
    mine = start_env([SCRIPT, "study"], {"MALLOC_TOP_PAD_": "1"})
    assert mine is not None and mine["MALLOC_TOP_PAD_"] == "1"  # the user's own value stays


def test_huge_pages_join_the_users_own_tunables_unless_turned_off() -> None:
    env = start_env([SCRIPT, "measure", "m"], {})
    assert env is not None and env["GLIBC_TUNABLES"] == HUGE_PAGES
    # The malloc settings alone no longer suffice: the huge pages are asked for too.
    theirs = start_env([SCRIPT, "worker"], {**PROCESS_START_ENV, "GLIBC_TUNABLES": "a.b.c=1"})
    assert theirs is not None and theirs["GLIBC_TUNABLES"] == f"a.b.c=1:{HUGE_PAGES}"
    own = {**PROCESS_START_ENV, "GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}
    assert start_env([SCRIPT, "worker"], own) is None  # the user's own choice stands
    off = {**PROCESS_START_ENV, "OPDB_MEASURE__HUGE_PAGES": "false"}
    assert start_env([SCRIPT, "worker"], off) is None
    no_malloc = start_env([SCRIPT, "demo"], {"OPDB_MEASURE__HUGE_PAGES": "0"})
    assert no_malloc is not None and "GLIBC_TUNABLES" not in no_malloc


def test_the_entry_point_runs_a_measuring_command_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """``opdb worker`` execs ``python -m operator_db worker`` with the settings added."""
    from operator_db.cli import main

    seen: list[tuple[str, list[str], dict[str, str]]] = []

    class ExecError(Exception):
        pass

    def execve(path: str, args: list[str], env: dict[str, str]) -> None:
        seen.append((path, args, env))
        raise ExecError

    for key in (*PROCESS_START_ENV, "GLIBC_TUNABLES", "OPDB_MEASURE__HUGE_PAGES"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(sys, "argv", [SCRIPT, "worker", "--once"])
    monkeypatch.setattr(os, "execve", execve)
    with pytest.raises(ExecError):
        main.entry()
    [(path, args, env)] = seen
    assert path == sys.executable and args[1:] == ["-m", "operator_db", "worker", "--once"]
    assert all(env[k] == v for k, v in PROCESS_START_ENV.items())
    assert env["GLIBC_TUNABLES"] == HUGE_PAGES
