"""``opdb db``: schema migrations and a look at what the database holds."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from operator_db.cli.common import DatabaseOption, console, open_store

app = typer.Typer(help="Create, migrate and inspect the database.", no_args_is_help=True)


@app.command()
def upgrade(
    db: DatabaseOption = None,
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Migrate the database up to the newest schema (or REVISION)."""
    from operator_db.db import migrate

    with open_store(db, migrate=False) as store:
        migrate.upgrade(store.engine, revision)
        revision = migrate.current_revision(store.engine) or "base (empty)"
        console.print(f"{store.display_url}: at revision {revision}")


@app.command()
def downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision; 'base' drops every table.")],
    db: DatabaseOption = None,
) -> None:
    """Migrate the database down to REVISION."""
    from operator_db.db import migrate

    with open_store(db, migrate=False) as store:
        migrate.downgrade(store.engine, revision)
        revision = migrate.current_revision(store.engine) or "base (empty)"
        console.print(f"{store.display_url}: at revision {revision}")


@app.command()
def status(db: DatabaseOption = None) -> None:
    """Show the schema revision and the number of rows in each table."""
    from operator_db.db import migrate
    from operator_db.db.queries import row_counts

    with open_store(db, migrate=False) as store:
        current = migrate.current_revision(store.engine)
        head = migrate.head_revision()
        console.print(f"database: {store.display_url}")
        console.print(f"revision: {current or 'empty'} (code expects {head})")
        if current == head:
            with store.transaction() as session:
                counts = row_counts(session)
            table = Table("table", "rows")
            for name, count in counts.items():
                table.add_row(name, str(count))
            console.print(table)
