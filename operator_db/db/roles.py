"""PostgreSQL's roles of a deployment (owner, API, worker) and the one table of what each may do.

Three login roles share a PostgreSQL database, none of them a superuser:

- the **owner** runs the migrations (``opdb db upgrade``): it owns every table and may create
  tables in schema ``public``; nothing beyond (no CREATEROLE, no CREATEDB);
- the **API** (``opdb serve``) reads every table and writes what its write routes write;
- the **worker** (``opdb worker``) claims and runs jobs, registers its host and kind, and
  inserts results; it reads only what it needs.

:data:`GRANTS` is the table of what the API and the worker may do, table by table (the owner may
do anything to what it owns). It is applied by :func:`grant_statements`, after every upgrade:
PostgreSQL's default privileges are per kind of object (every new table alike), so they cannot
give a new table its own grants; the grants are re-applied from this table instead, by the
owner (``opdb db grants``), and a new table without an entry here fails the tests.

:func:`role_statements` creates or corrects the roles, the database's and the schema's privileges
and the tables' owner (an admin's work: a superuser, or CREATEROLE for the roles alone).
Every statement is idempotent: applied again, the catalogs end as they were.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from operator_db.db import llm_tables as _llm_tables  # noqa: F401 - its tables
from operator_db.db import predictor_tables as _predictor_tables  # noqa: F401 - its tables
from operator_db.db.engine import describe_db_error, make_engine, safe_url
from operator_db.db.migrate import VERSION_TABLE, current_revision, head_revision
from operator_db.db.models import Base
from operator_db.db.passwords import scram_verifier, verifier_matches
from operator_db.errors import ConfigurationError, DatabaseError, InvalidInputError

SCHEMA = "public"
"""The schema the migrations create their tables in (the connection's default)."""

KINDS = ("owner", "api", "worker")
"""The three roles of a deployment, by what they run."""

DEFAULT_NAMES = {"owner": "opdb_owner", "api": "opdb_api", "worker": "opdb_worker"}

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
"""A role name this module accepts: a plain lowercase SQL identifier (no quoting surprises)."""


@dataclass(frozen=True)
class Access:
    """What one role may do to one table.

    ``select``: True for every column, a tuple for those columns alone, False for none.
    ``update``: the columns it may set. An insert into a table with a serial id also gets
    USAGE on the id's sequence.
    """

    select: bool | tuple[str, ...] = True
    insert: bool = False
    update: tuple[str, ...] = ()
    delete: bool = False

    def grants(self) -> list[tuple[str, tuple[str, ...]]]:
        """Return (privilege, columns) pairs, ``select`` first; no columns: the whole table."""
        found: list[tuple[str, tuple[str, ...]]] = []
        if self.select is True:
            found.append(("select", ()))
        elif self.select:
            found.append(("select", tuple(self.select)))
        if self.insert:
            found.append(("insert", ()))
        if self.update:
            found.append(("update", self.update))
        if self.delete:
            found.append(("delete", ()))
        return found

    def privileges(self) -> list[str]:
        """Return the privileges as GRANT names them (``SELECT``, ``UPDATE (a, b)``, ...)."""
        return [
            f"{name.upper()} ({', '.join(_quote(c) for c in columns)})" if columns else name.upper()
            for name, columns in self.grants()
        ]

    def describe(self) -> str:
        """Return the privileges in words for the docs' table (``select, insert``; ``none``)."""
        words = [
            f"{name} ({', '.join(columns)})" if columns else name for name, columns in self.grants()
        ]
        return ", ".join(words) or "none"


READ = Access()
"""Every column, read only."""
NONE = Access(select=False)
"""Nothing at all."""

_JOB_LEASE = ("status", "lease_owner", "lease_expires_at", "updated_at", "finished_at")
"""What cancelling a job sets (``queue.cancel_job``); the worker's lease steps set these too."""
_SPEC_FIELDS = (
    "reference",
    "overrides",
    "mode",
    "dtype",
    "batch_size",
    "inputs",
    "description",
    "spec_version",
    "spec_hash",
    "provenance",
    "calls",
    "syncs",
    "updated_at",
)
"""What a changed spec re-uploaded sets of its model (``ingest.ingest_spec``); never the name."""


@dataclass(frozen=True)
class Grant:
    """What the API and the worker may do to one table."""

    api: Access
    worker: Access


GRANTS: Mapping[str, Grant] = {
    # Both check the schema's revision at start; only the owner's migrations change it.
    VERSION_TABLE: Grant(api=READ, worker=READ),
    # POST /specs (ingest): a new model, or a changed one's fields and operator list replaced;
    # DELETE /models/{name}. The cascade to its operators, jobs and runs is the database's own
    # (foreign keys ON DELETE CASCADE act with the owner's rights). A job reads a model.
    "models": Grant(api=Access(insert=True, update=_SPEC_FIELDS, delete=True), worker=READ),
    "operator_configs": Grant(api=Access(insert=True), worker=READ),
    "model_operators": Grant(api=Access(insert=True, delete=True), worker=READ),
    # Enqueueing on a kind not seen yet creates it (API); a worker registers its kind and sets
    # what its device says of it (``Worker.register``).
    "device_kinds": Grant(
        api=Access(insert=True),
        worker=Access(insert=True, update=("vendor", "architecture", "memory_bytes")),
    ),
    "hosts": Grant(
        api=READ,
        worker=Access(
            insert=True,
            update=(
                "device_kind_id",
                "info",
                "counter_update_period_s",
                "idle_power_w",
                "last_seen",
            ),
        ),
    ),
    # Enqueue and cancel (API); claim, renew, finish, fail, hand back, expire (worker). Neither
    # may change what a job measures (target, config, model, kind, options) once queued, nor
    # the worker its priority or attempts allowed.
    "jobs": Grant(
        api=Access(insert=True, update=_JOB_LEASE),
        worker=Access(update=(*_JOB_LEASE, "attempts", "last_error")),
    ),
    # A worker inserts its results (the id comes back: RETURNING needs it) and reads no figure.
    "measurements": Grant(api=READ, worker=Access(select=("id",), insert=True)),
    "full_model_runs": Grant(api=READ, worker=Access(select=("id",), insert=True)),
    # Written by the owner's commands alone (opdb import, opdb peaks, opdb ncu, opdb predict).
    "data_sources": Grant(api=READ, worker=NONE),
    "device_peaks": Grant(api=READ, worker=NONE),
    "ncu_counters": Grant(api=READ, worker=NONE),
    "predictors": Grant(api=READ, worker=NONE),
    "cross_predictors": Grant(api=READ, worker=NONE),
    # An LLM and its step models are stored with its specs (opdb llm harvest), its generate()
    # runs by opdb llm measure, as opdb measure does: the owner's. A worker measures the step
    # models as any model.
    "llms": Grant(api=READ, worker=NONE),
    "llm_steps": Grant(api=READ, worker=NONE),
    "generation_runs": Grant(api=READ, worker=NONE),
    "ui_sessions": Grant(api=Access(insert=True, delete=True), worker=NONE),
}
"""What the API and the worker may do, table by table; the owner owns them all."""


@dataclass(frozen=True)
class RoleNames:
    """The login roles' names (plain lowercase identifiers)."""

    owner: str = DEFAULT_NAMES["owner"]
    api: str = DEFAULT_NAMES["api"]
    worker: str = DEFAULT_NAMES["worker"]

    def __post_init__(self) -> None:
        """Check the names.

        Raises:
            InvalidInputError: a name is not a plain identifier, is reserved (``pg_``), or two
                roles share one.
        """
        _check_names(dict(zip(KINDS, (self.owner, self.api, self.worker), strict=True)))

    @property
    def all(self) -> tuple[str, str, str]:
        """The owner, the API and the worker, in that order."""
        return (self.owner, self.api, self.worker)


def _check_names(names: Mapping[str, str]) -> None:
    """Refuse a name that is not a plain identifier, a reserved one, or one given twice.

    Raises:
        InvalidInputError: naming the role.
    """
    for kind, name in names.items():
        if not _NAME.fullmatch(name) or name.startswith("pg_"):
            raise InvalidInputError(
                f"role name {name!r} ({kind}): use lowercase letters, digits and _, "
                "at most 63, not starting with a digit or pg_"
            )
    if len(set(names.values())) < len(names):
        raise InvalidInputError(f"the {', '.join(names)} roles need different names")


def _quote(name: str) -> str:
    """Return ``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def serial_sequence(table: str) -> str | None:
    """Return the sequence of the table's serial id (``<table>_id_seq``), or None without one."""
    if table == VERSION_TABLE:
        return None
    column = Base.metadata.tables[table].autoincrement_column
    return None if column is None else f"{table}_{column.name}_seq"


def grant_statements(api: str, worker: str) -> list[str]:
    """Return the statements that give the roles ``api`` and ``worker`` :data:`GRANTS`, no more.

    Each table's (and serial sequence's) privileges of the two roles are revoked, then granted
    as the table says, so that the end is the same whatever they held before. Run by the owner
    (or a superuser) once the tables exist, after every ``opdb db upgrade``.

    Raises:
        InvalidInputError: a name is not a plain identifier, or both are one.
    """
    _check_names({"api": api, "worker": worker})
    roles = f"{_quote(api)}, {_quote(worker)}"
    statements: list[str] = []
    for table, grant in GRANTS.items():
        qualified = f"{SCHEMA}.{_quote(table)}"
        statements.append(f"REVOKE ALL ON TABLE {qualified} FROM {roles}")
        sequence = serial_sequence(table)
        if sequence is not None:
            statements.append(f"REVOKE ALL ON SEQUENCE {SCHEMA}.{_quote(sequence)} FROM {roles}")
        for role, access in ((api, grant.api), (worker, grant.worker)):
            privileges = access.privileges()
            if privileges:
                statements.append(
                    f"GRANT {', '.join(privileges)} ON TABLE {qualified} TO {_quote(role)}"
                )
            if access.insert and sequence is not None:
                statements.append(
                    f"GRANT USAGE ON SEQUENCE {SCHEMA}.{_quote(sequence)} TO {_quote(role)}"
                )
    return statements


_ROLE = """DO $$
DECLARE r pg_catalog.pg_roles;
BEGIN
  SELECT * INTO r FROM pg_catalog.pg_roles WHERE rolname = '{name}';
  IF NOT FOUND THEN
    CREATE ROLE {quoted} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
  ELSE
    IF r.rolsuper THEN ALTER ROLE {quoted} NOSUPERUSER; END IF;
    IF r.rolreplication THEN ALTER ROLE {quoted} NOREPLICATION; END IF;
    IF r.rolbypassrls THEN ALTER ROLE {quoted} NOBYPASSRLS; END IF;
    IF r.rolcreatedb THEN ALTER ROLE {quoted} NOCREATEDB; END IF;
    IF r.rolcreaterole THEN ALTER ROLE {quoted} NOCREATEROLE; END IF;
    IF NOT r.rolcanlogin THEN ALTER ROLE {quoted} LOGIN; END IF;
  END IF;
END $$"""
"""Create a login role, or take from an existing one what it must not have. Only what is wrong
is altered: a CREATEROLE admin may not name SUPERUSER or REPLICATION at all, even to deny them."""

_DATABASE = """DO $$
BEGIN
  EXECUTE 'REVOKE ALL ON DATABASE ' || quote_ident(current_database()) || ' FROM PUBLIC, {roles}';
  EXECUTE 'GRANT CONNECT ON DATABASE ' || quote_ident(current_database()) || ' TO {roles}';
END $$"""
"""The database: the three roles may connect, no one may create schemas or temporary tables."""

_OWNERSHIP = """DO $$
DECLARE t text;
BEGIN
  FOR t IN
    SELECT c.relname FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = '{schema}' AND c.relkind IN ('r', 'p')
       AND c.relname = ANY (ARRAY[{tables}])
       AND pg_catalog.pg_get_userbyid(c.relowner) <> '{owner}'
  LOOP
    EXECUTE 'ALTER TABLE {schema}.' || quote_ident(t) || ' OWNER TO {quoted}';
  END LOOP;
END $$"""
"""Tables that exist under another owner (a deployment from before the roles) go to the owner,
with their indexes and serial sequences; a table already the owner's is not touched (ALTER
TABLE would lock it)."""


def role_statements(names: RoleNames) -> list[str]:
    """Return the statements that set up the three roles in the connection's database.

    Creates the login roles (or takes SUPERUSER, CREATEDB, CREATEROLE, REPLICATION and
    BYPASSRLS from existing ones), lets them connect (and no one else: PUBLIC loses CONNECT and
    TEMPORARY), revokes CREATE on schema ``public`` from PUBLIC, lets the owner create there
    and the others only use it, and hands existing tables to the owner. Passwords are set apart
    (:func:`password_statement`). Run by a superuser (or the database's owner with CREATEROLE).
    """
    statements = [_ROLE.format(name=name, quoted=_quote(name)) for name in names.all]
    statements.append(_DATABASE.format(roles=", ".join(_quote(n) for n in names.all)))
    schema = _quote(SCHEMA)
    users = f"{_quote(names.api)}, {_quote(names.worker)}"
    # Revoked from all three, then granted in one order: the ACL comes out the same each time.
    statements += [
        f"REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC",
        f"REVOKE ALL ON SCHEMA {schema} FROM {', '.join(_quote(n) for n in names.all)}",
        f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {_quote(names.owner)}",
        f"GRANT USAGE ON SCHEMA {schema} TO {users}",
    ]
    tables = ", ".join(f"'{table}'" for table in GRANTS)
    statements.append(
        _OWNERSHIP.format(
            schema=SCHEMA, tables=tables, owner=names.owner, quoted=_quote(names.owner)
        )
    )
    return statements


def password_statement(role: str, password: str) -> str:
    """Return ``ALTER ROLE ... PASSWORD`` with the password's SCRAM secret (a new salt)."""
    return f"ALTER ROLE {_quote(role)} PASSWORD '{scram_verifier(password)}'"


@dataclass
class Applied:
    """What :func:`apply_roles` or :func:`apply_grants` did, for the command to print."""

    url: str
    created: list[str] = field(default_factory=list)
    passwords: list[str] = field(default_factory=list)
    """Roles whose password was set (one already set to the same password is left)."""
    tables: int = 0
    """Tables granted on; 0 where there are none yet (before the migrations)."""


def _connect_url(url: str) -> None:
    """Refuse a database that has no roles.

    Raises:
        ConfigurationError: a URL of another database than PostgreSQL (SQLite).
    """
    from sqlalchemy.engine import make_url

    try:
        backend = make_url(url).get_backend_name()
    except Exception as exc:  # noqa: BLE001 - sqlalchemy raises ArgumentError and ValueError
        raise DatabaseError(f"invalid database URL {safe_url(url)!r}: {exc}") from None
    if backend != "postgresql":
        raise ConfigurationError(
            f"{safe_url(url)}: {backend} has no roles; roles and grants are for PostgreSQL"
        )


def _grants_if_current(conn: Connection, url: str, api: str, worker: str, *, required: bool) -> int:
    """Apply :data:`GRANTS` when the schema is at the code's head; return the tables granted on.

    A schema at another revision (or none) gets no grants: 0, or with ``required`` an error.

    Raises:
        DatabaseError: the schema is not at the code's head and ``required``.
    """
    current = current_revision(conn)  # in this transaction: it may hold the tables' locks
    head = head_revision()
    if current != head:
        if not required:
            return 0
        state = "empty" if current is None else f"at revision {current}"
        raise DatabaseError(
            f"database {safe_url(url)} is {state}, the grants are for {head}: "
            "run `opdb db upgrade` first"
        )
    for statement in grant_statements(api, worker):
        conn.exec_driver_sql(statement)
    return len(GRANTS)


def apply_roles(url: str, names: RoleNames, passwords: Mapping[str, str | None]) -> Applied:
    """Set up the roles in the database at ``url`` in one transaction (see :func:`role_statements`).

    ``passwords`` maps a role's name to its password (None: left as it is). Where the tables
    are at the code's revision, the grants are applied too (``Applied.tables``).

    Raises:
        ConfigurationError: ``url`` is not PostgreSQL's.
        InvalidInputError: one of the names is the connection's own role.
        DatabaseError: unreachable, or the connection may not create roles or grant.
    """
    _connect_url(url)
    engine = make_engine(url)
    applied = Applied(safe_url(url))
    try:
        with engine.begin() as conn:
            me = conn.exec_driver_sql("SELECT current_user").scalar_one()
            if me in names.all:
                raise InvalidInputError(
                    f"connected as {me}, one of the roles to set up: connect as an admin "
                    "(a superuser) to run `opdb db roles`"
                )
            existing = set(
                conn.execute(
                    text("SELECT rolname FROM pg_catalog.pg_roles WHERE rolname = ANY(:n)"),
                    {"n": list(names.all)},
                ).scalars()
            )
            applied.created = [n for n in names.all if n not in existing]
            for statement in role_statements(names):
                conn.exec_driver_sql(statement)
            readable = conn.exec_driver_sql(
                "SELECT has_table_privilege('pg_catalog.pg_authid', 'SELECT')"
            ).scalar_one()
            for role, password in passwords.items():
                if password is None:
                    continue
                stored = (
                    conn.execute(
                        text("SELECT rolpassword FROM pg_catalog.pg_authid WHERE rolname = :r"),
                        {"r": role},
                    ).scalar_one_or_none()
                    if readable
                    else None
                )
                if not verifier_matches(stored, password):
                    conn.exec_driver_sql(password_statement(role, password))
                    applied.passwords.append(role)
            applied.tables = _grants_if_current(conn, url, names.api, names.worker, required=False)
    except DBAPIError as exc:
        raise describe_db_error(exc, url) from None
    finally:
        engine.dispose()
    return applied


def apply_grants(url: str, api: str, worker: str) -> Applied:
    """Apply :data:`GRANTS` for the roles ``api`` and ``worker`` at ``url``, in one transaction.

    Run by the owner (or a superuser) after every ``opdb db upgrade``.

    Raises:
        ConfigurationError: ``url`` is not PostgreSQL's.
        InvalidInputError: a name is not a plain identifier, or both are one.
        DatabaseError: unreachable, the schema is not at the code's revision, a role is
            missing, or the connection may not grant on the tables (not their owner).
    """
    _check_names({"api": api, "worker": worker})
    _connect_url(url)
    engine = make_engine(url)
    applied = Applied(safe_url(url))
    try:
        with engine.begin() as conn:
            applied.tables = _grants_if_current(conn, url, api, worker, required=True)
    except DBAPIError as exc:
        raise describe_db_error(exc, url) from None
    finally:
        engine.dispose()
    return applied


def script(statements: list[str], heading: str) -> str:
    """Return ``statements`` as one SQL script in a transaction, for psql (an init script)."""
    lines = [f"-- {line}" if line else "--" for line in heading.splitlines()]
    body = [f"{statement};" for statement in statements]
    return "\n".join([*lines, "BEGIN;", *body, "COMMIT;", ""])
