"""``opdb db``: schema migrations and a look at what the database holds."""

from __future__ import annotations

import os
from pathlib import Path
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


OwnerRole = Annotated[
    str, typer.Option("--owner", help="The role that owns the tables and runs the migrations.")
]
ApiRole = Annotated[str, typer.Option("--api", help="The role of the API (`opdb serve`).")]
WorkerRole = Annotated[str, typer.Option("--worker", help="The role of the workers.")]
PrintSql = Annotated[
    bool, typer.Option("--print-sql", help="Print the SQL (for psql) instead of running it.")
]


def _password_file(kind: str) -> object:
    return typer.Option(
        f"--{kind}-password-file",
        envvar=f"OPDB_ROLES_{kind.upper()}_PASSWORD_FILE",
        help=f"A file holding the {kind} role's password (or OPDB_ROLES_{kind.upper()}_PASSWORD); "
        "without either, a password is left as it is.",
        dir_okay=False,
    )


@app.command()
def roles(
    db: DatabaseOption = None,
    owner: OwnerRole = "opdb_owner",
    api: ApiRole = "opdb_api",
    worker: WorkerRole = "opdb_worker",
    owner_password_file: Annotated[Path | None, _password_file("owner")] = None,
    api_password_file: Annotated[Path | None, _password_file("api")] = None,
    worker_password_file: Annotated[Path | None, _password_file("worker")] = None,
    print_sql: PrintSql = False,
) -> None:
    """Create or correct PostgreSQL's login roles of the owner, the API and the workers.

    Run as a superuser (docs/database.md, "Roles on PostgreSQL"). None of the roles is a
    superuser or may create roles or databases; only the owner may create tables. Existing
    tables are handed to the owner; at the code's revision, granted on (as `opdb db grants`).
    """
    from operator_db.db import roles as roles_
    from operator_db.db.passwords import read_password

    names = roles_.RoleNames(owner=owner, api=api, worker=worker)
    if print_sql:
        heading = (
            f"operator-db roles {' '.join(names.all)}: run by a superuser before `opdb db "
            f"upgrade`\n(as {owner}); passwords are set apart. Table grants: `opdb db grants`."
        )
        typer.echo(roles_.script(roles_.role_statements(names), heading), nl=False)
        return
    files = {owner: owner_password_file, api: api_password_file, worker: worker_password_file}
    passwords = {
        name: read_password(
            files[name],
            os.environ.get(f"OPDB_ROLES_{kind.upper()}_PASSWORD"),
            f"the {kind} role's password",
        )
        for kind, name in zip(roles_.KINDS, names.all, strict=True)
    }
    applied = roles_.apply_roles(_database_url(db), names, passwords)
    console.print(f"{applied.url}: roles {', '.join(names.all)} set up")
    if applied.created:
        console.print(f"created: {', '.join(applied.created)}")
    if applied.passwords:
        console.print(f"password set: {', '.join(applied.passwords)}")
    if applied.tables:
        console.print(f"granted on {applied.tables} tables")
    else:
        console.print(
            f"no grants on tables yet (none at the code's revision): run `opdb db upgrade` as "
            f"{owner}, then `opdb db grants`"
        )


@app.command()
def grants(
    db: DatabaseOption = None,
    api: ApiRole = "opdb_api",
    worker: WorkerRole = "opdb_worker",
    print_sql: PrintSql = False,
) -> None:
    """Grant the API and the workers what each uses of the tables, and nothing more.

    Run as the owner (or a superuser) after every `opdb db upgrade`; running it again changes
    nothing. The grants: operator_db/db/roles.py's GRANTS (docs/database.md, "Roles on
    PostgreSQL").
    """
    from operator_db.db import migrate
    from operator_db.db import roles as roles_

    if print_sql:
        heading = (
            f"operator-db grants to {api} and {worker} (schema revision "
            f"{migrate.head_revision()}):\nrun by the owner after every `opdb db upgrade`."
        )
        typer.echo(roles_.script(roles_.grant_statements(api, worker), heading), nl=False)
        return
    applied = roles_.apply_grants(_database_url(db), api, worker)
    console.print(f"{applied.url}: granted on {applied.tables} tables to {api} and {worker}")


def _database_url(db: str | None) -> str:
    """Return ``--db`` or the settings' database URL."""
    if db is not None:
        return db
    from operator_db.config import get_settings

    return get_settings().database_url
