"""What every command shares: consoles, option aliases, opening the store.

Command modules import only what typer needs to register them (typer, rich, these aliases) at
module level; the library behind a command (torch, pandas, matplotlib, alembic) is imported in the
command's body, so that ``opdb --help`` and the database commands start at once
(tests/cli/test_startup.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

if TYPE_CHECKING:
    from rich.progress import Progress

    from operator_db.db.store import Store


def _console(*, stderr: bool = False) -> Console:
    """Return a console that prints strings as they are: no markup, no emoji codes.

    What the commands print holds stored free text (a spec's reference, an error, a kind's
    name): read as Rich markup, ``[link=...]`` in it would print a terminal hyperlink to another
    site, and ``[/]`` would fail. Styles are given as ``rich.text.Text`` objects instead.
    """
    probe = Console(stderr=stderr)
    # Rich assumes 80 columns when not on a terminal; tables piped to a file or CI log would be cut.
    width = None if probe.is_terminal else 160
    return Console(
        stderr=stderr, highlight=False, markup=False, emoji=False, width=width, soft_wrap=stderr
    )


console = _console()
err_console = _console(stderr=True)


def progress_bar(*, disable: bool = False) -> Progress:
    """Return the commands' progress display on :data:`console`.

    Description, bar, done of all, time elapsed. rich.progress is imported here, by the
    commands that show one.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=disable,
    )


DatabaseOption = Annotated[
    str | None,
    typer.Option("--db", help="Database URL (default: OPDB_DATABASE_URL, else a SQLite file)."),
]

DeviceOption = Annotated[
    str | None,
    typer.Option(
        "--device", help="auto, cpu, nvidia[:N] / cuda[:N] or fake (default: OPDB_DEVICE)."
    ),
]


def open_store(db: str | None, *, migrate: bool = True) -> Store:
    """Open the database named by ``--db`` or the settings, checking its schema revision."""
    from operator_db.config import get_settings
    from operator_db.db.store import Store

    settings = get_settings()
    if db is None:
        return Store.from_settings(settings, migrate=migrate)
    return Store.open(
        db,
        migrate=migrate,
        auto_upgrade_sqlite=settings.auto_upgrade_sqlite,
        echo=settings.sql_echo,
    )
