"""What every command shares: consoles, option aliases, opening the store.

Command modules import only what typer needs to register them (typer, rich, these aliases) at
module level; the library behind a command (torch, pandas, matplotlib, alembic) is imported in the
command's body, so that ``opdb --help`` and the database commands start at once
(tests/cli/test_startup.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

if TYPE_CHECKING:
    from rich.progress import Progress

    from operator_db.db.store import Store


CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""C0 (but tab and newline), DEL and C1: what a terminal may take as a command (ESC begins one)."""


def terminal_safe(text: str) -> str:
    r"""Return ``text`` with each control character written as an escape (``\x1b``)."""
    return CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class PlainConsole(Console):
    r"""A console whose text cannot command the terminal: control characters are escaped.

    Rich's own styles and cursor moves are made after this (from styles, and as control segments),
    so they are kept; stored text with ESC in it (a spec's reference holding an OSC 8 hyperlink or
    an OSC 0 window title) prints as ``\x1b]8;;...``. Strings are escaped before Rich measures
    them (``render_str``: a table's column fits the escaped text), ``Text`` as it is rendered.
    """

    def render_str(self, text: str, **kwargs: Any) -> Text:
        """Make ``text`` a ``Text`` as Rich does, its control characters escaped first."""
        return super().render_str(terminal_safe(text), **kwargs)

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        """Render as Rich does, escaping control characters in the text of each segment."""
        for segment in super().render(renderable, options):
            if segment.control is None and CONTROLS.search(segment.text):
                segment = Segment(terminal_safe(segment.text), segment.style)
            yield segment


def _console(*, stderr: bool = False) -> Console:
    """Return a console that prints strings as they are: no markup, no emoji codes, no controls.

    What the commands print holds stored free text (a spec's reference, an error, a kind's
    name): read as Rich markup, ``[link=...]`` in it would print a terminal hyperlink to another
    site, and ``[/]`` would fail. Styles are given as ``rich.text.Text`` objects instead. Control
    characters are escaped (:class:`PlainConsole`).
    """
    probe = Console(stderr=stderr)
    # Rich assumes 80 columns when not on a terminal; tables piped to a file or CI log would be cut.
    width = None if probe.is_terminal else 160
    return PlainConsole(
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
