"""The ``opdb`` command: one typer app; errors become one line and exit code 1.

A worker whose CUDA context was lost exits with :data:`EXIT_RESTART` instead, for a supervisor.
"""

from __future__ import annotations

import gc
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import typer
from typer.exceptions import TyperException
from typer.main import get_command_name

from operator_db import __version__
from operator_db.cli import db as db_cli
from operator_db.cli import llm as llm_cli
from operator_db.cli import models as models_cli
from operator_db.cli import ncu as ncu_cli
from operator_db.cli import predict as predict_cli
from operator_db.cli.across import compare
from operator_db.cli.common import err_console
from operator_db.cli.demo import demo
from operator_db.cli.diff import diff
from operator_db.cli.doctor import doctor
from operator_db.cli.estimate import chips, estimate, peaks, roofline
from operator_db.cli.harvest import harvest
from operator_db.cli.imports import import_
from operator_db.cli.ingest import ingest
from operator_db.cli.report import report
from operator_db.cli.serve import serve
from operator_db.cli.study import study
from operator_db.cli.sweep import sweep
from operator_db.cli.work import enqueue, jobs_status, measure, worker
from operator_db.errors import DeviceContextLostError, OperatorDBError

EXIT_RESTART = 75
"""Exit code of ``opdb worker`` / ``opdb measure`` after a sticky CUDA error (EX_TEMPFAIL of
sysexits.h): the job went back to the queue and the process must be started afresh (systemd
``RestartForceExitStatus=75``, or a Docker/Kubernetes restart policy)."""

_APP_OPTIONS: dict[str, Any] = {
    "name": "opdb",
    "help": "operator-db: per-operator time and energy of PyTorch models, kept in SQL.",
    "no_args_is_help": True,
    "pretty_exceptions_enable": False,
    "add_completion": False,
}
app = typer.Typer(**_APP_OPTIONS)
app.add_typer(db_cli.app, name="db")
app.add_typer(llm_cli.app, name="llm")
app.add_typer(models_cli.app, name="models")
app.add_typer(ncu_cli.app, name="ncu")
app.add_typer(predict_cli.app, name="predict")
app.command()(harvest)
app.command()(ingest)
app.command("import")(import_)
app.command()(demo)
app.command()(serve)
app.command()(enqueue)
app.command()(worker)
app.command()(measure)
app.command("jobs")(jobs_status)
app.command()(estimate)
app.command()(compare)
app.command()(diff)
app.command()(roofline)
app.command()(peaks)
app.command()(chips)
app.command()(report)
app.command()(study)
app.command()(sweep)
app.command()(doctor)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"opdb {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """operator-db: per-operator time and energy of PyTorch models, kept in SQL."""


def _debug() -> bool:
    if os.environ.get("OPDB_DEBUG", "").lower() in ("1", "true", "yes"):
        return True
    try:
        from operator_db.config import get_settings

        return get_settings().debug
    except Exception:  # noqa: BLE001 - broken settings must not hide the original error
        return False


def app_for(args: Sequence[str]) -> typer.Typer:
    """Return an app holding only the command ``args`` start with, or the whole app.

    typer builds every command's click command, their parameters' types resolved, on each start
    (35 ms for opdb's 41 on a 2-vCPU EPYC); a command named first needs its own alone. Options
    before it, or a name that is no command, get the whole app (its help, its "No such command").
    """
    if not args or args[0].startswith("-"):
        return app
    name = args[0]
    commands = [
        info
        for info in app.registered_commands
        if info.callback is not None
        and (info.name or get_command_name(info.callback.__name__)) == name
    ]
    groups = [info for info in app.registered_groups if info.name == name]
    if not commands and not groups:
        return app
    one = typer.Typer(**_APP_OPTIONS)
    one.registered_callback = app.registered_callback
    one.registered_commands = commands
    one.registered_groups = groups
    return one


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``opdb`` with ``argv`` (default: the process arguments); return the exit code.

    A user error (bad spec, unknown model, unreachable database) prints one line to stderr and
    returns 1; set ``OPDB_DEBUG=1`` for the traceback. A lost CUDA context returns
    :data:`EXIT_RESTART`, with the traceback too under ``OPDB_DEBUG=1`` (the code stays).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = app_for(args)(args=args, prog_name="opdb", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("interrupted")
        return 130
    except TyperException as exc:  # usage errors: the message and the usage line, exit code 2
        show = getattr(exc, "show", None)
        if callable(show):
            show(file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    except DeviceContextLostError as exc:
        if _debug():
            traceback.print_exception(exc)
        err_console.print(f"error: {exc}", markup=False)
        return EXIT_RESTART
    except OperatorDBError as exc:
        if _debug():
            raise
        err_console.print(f"error: {exc}", markup=False)
        return 1
    except Exception as exc:
        # Only commands that open a database import SQLAlchemy (a tenth of a second), not opdb
        # itself: where it was never imported, no DBAPIError (a driver's error) was raised.
        if "sqlalchemy.exc" not in sys.modules:
            raise
        from sqlalchemy.exc import DBAPIError

        if not isinstance(exc, DBAPIError) or _debug():
            raise
        from operator_db.db.engine import describe_db_error

        url = os.environ.get("OPDB_DATABASE_URL") or "the database"
        err_console.print(f"error: {describe_db_error(exc, url)}", markup=False)
        return 1
    # Without standalone mode, click returns the code of a typer.Exit raised by a command.
    return code if isinstance(code, int) else 0


def entry() -> None:
    """Console-script entry point.

    A measuring command starts again at once with glibc's allocator set from the process's start
    (:func:`operator_db.cli.process_env.start_env`).
    """
    from operator_db.cli.process_env import start_env, stop_while_starting

    env = start_env(sys.argv, dict(os.environ))
    if env is not None:
        os.execve(sys.executable, [sys.executable, "-m", "operator_db", *sys.argv[1:]], env)
    stop_while_starting(sys.argv)
    code = main()
    if code == EXIT_RESTART:
        # The CUDA context is poisoned: the interpreter's teardown frees CUDA tensors, which may
        # call into CUDA and abort the process, replacing the exit code a supervisor acts on.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    # What is alive now lives until the process ends: frozen, it is left out of the collections
    # the interpreter runs as it ends, which walked it all (75 ms of `opdb models list`'s 0.54 s
    # on a 2-vCPU EPYC). atexit handlers and the flushing of files still run.
    gc.freeze()
    sys.exit(code)
