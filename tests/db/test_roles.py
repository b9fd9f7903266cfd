"""PostgreSQL's roles: the API and the worker can do their work under theirs, and nothing else.

One database for the module: a superuser creates the roles (``opdb db roles``), the owner runs
the migrations (``opdb db upgrade``) and grants (``opdb db grants``); then the API serves a real
flow and a worker measures on the fake device, each connected as its role, and every forbidden
statement is refused with PostgreSQL's InsufficientPrivilege.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg_errors
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from operator_db.cli.main import main
from operator_db.db import queries, queue
from operator_db.db.ingest import ingest_specs
from operator_db.db.migrate import VERSION_TABLE
from operator_db.db.models import Base
from operator_db.db.passwords import read_password, scram_verifier, verifier_matches
from operator_db.db.roles import (
    GRANTS,
    KINDS,
    RoleNames,
    grant_statements,
    role_statements,
    script,
    serial_sequence,
)
from operator_db.db.store import Store
from operator_db.devices.fake import FakeDevice
from operator_db.errors import InvalidInputError
from operator_db.measure.settings import fast_settings
from operator_db.specs import parse_spec
from operator_db.worker.daemon import Worker, WorkerOptions
from tests.api.common import AUTH, api_client
from tests.conftest import (
    POSTGRES_URL,
    REQUIRE_POSTGRES,
    _fresh_postgres,
    _owner_alive,
    _postgres_unavailable,
)
from tests.helpers import EXAMPLE_SPECS, REPO, linear_op, relu_op, run_cli, spec_dict

_PREFIX = "opdb_test_"


@dataclass
class Deployment:
    """The module's database: its URL for each role (and the admin's), and the roles' names."""

    names: RoleNames
    urls: dict[str, str]
    engines: dict[str, Engine]
    password_files: dict[str, Path]


def _url(base: str, user: str) -> str:
    return make_url(base).set(username=user, password=None).render_as_string(hide_password=False)


def _drop_roles_of_dead_runs(admin: Engine) -> None:
    """Drop what interrupted runs left (their pid is in the names): databases, then roles."""
    with admin.connect() as conn:
        for kind, table, column in (
            ("DATABASE", "pg_database", "datname"),
            ("ROLE", "pg_roles", "rolname"),
        ):
            names = conn.execute(
                text(f"SELECT {column} FROM {table} WHERE {column} LIKE :p"), {"p": _PREFIX + "%"}
            ).scalars()
            for name in list(names):
                if not _owner_alive(name):
                    force = " WITH (FORCE)" if kind == "DATABASE" else ""
                    # Another run may be cleaning up the same leftovers at once.
                    with contextlib.suppress(DBAPIError):
                        conn.exec_driver_sql(f'DROP {kind} IF EXISTS "{name}"{force}')


def _opdb(*args: str) -> None:
    code = main(list(args))
    assert code == 0, f"opdb {' '.join(args)} exited with {code}"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    reason = _postgres_unavailable()
    if reason:
        if REQUIRE_POSTGRES:
            pytest.fail(reason + " (OPDB_TEST_REQUIRE_POSTGRES is set)")
        pytest.skip(reason)
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    _drop_roles_of_dead_runs(admin)
    stem = f"{_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:6]}"
    names = RoleNames(owner=f"{stem}_owner", api=f"{stem}_api", worker=f"{stem}_worker")
    secrets = tmp_path_factory.mktemp("secrets")
    files = {}
    for kind in KINDS:
        files[kind] = secrets / kind
        files[kind].write_text(f"pass-{kind}-{uuid.uuid4().hex}\n")
    for admin_url in _fresh_postgres(None):
        urls = {"admin": admin_url}
        urls |= {kind: _url(admin_url, getattr(names, kind)) for kind in KINDS}
        roles = ["--owner", names.owner, "--api", names.api, "--worker", names.worker]
        pairs = [(f"--{kind}-password-file", str(files[kind])) for kind in KINDS]
        _opdb("db", "roles", "--db", admin_url, *roles, *[x for pair in pairs for x in pair])
        _opdb("db", "upgrade", "--db", urls["owner"])
        _opdb("db", "grants", "--db", urls["owner"], "--api", names.api, "--worker", names.worker)
        engines = {kind: create_engine(url) for kind, url in urls.items()}
        try:
            yield Deployment(names, urls, engines, files)
        finally:
            for engine in engines.values():
                engine.dispose()
    with admin.connect() as conn:
        for name in names.all:
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{name}"')
    admin.dispose()


# --- the grant table itself -------------------------------------------------------------------


def test_the_grant_table_names_every_table_and_only_real_columns() -> None:
    assert set(GRANTS) == {*Base.metadata.tables, VERSION_TABLE}
    for table, grant in GRANTS.items():
        if table == VERSION_TABLE:
            continue
        columns = set(Base.metadata.tables[table].columns.keys())
        for access in (grant.api, grant.worker):
            named = set(access.update) | (
                set(access.select) if isinstance(access.select, tuple) else set()
            )
            assert named <= columns, (table, named - columns)


def test_database_md_shows_the_grant_table() -> None:
    doc = (REPO / "docs" / "database.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| (.+) \|$", doc, re.MULTILINE))
    for table, grant in GRANTS.items():
        assert rows.get(table) == f"{grant.api.describe()} | {grant.worker.describe()}", table


def test_the_sql_holds_no_percent_sign_nor_secret() -> None:
    """Executed as is by the driver and by psql: no placeholders, no passwords."""
    sql = script(role_statements(RoleNames()), "x") + script(grant_statements("a", "b"), "y")
    assert "%" not in sql and "PASSWORD" not in sql


def test_a_password_comes_from_a_file_or_a_variable(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text("s3cret word\n")
    assert read_password(path, None, "api") == "s3cret word"
    assert read_password(None, "from-env", "api") == "from-env"
    assert read_password(None, None, "api") is None
    with pytest.raises(InvalidInputError, match="in a file or a variable, not both"):
        read_password(path, "x", "api")
    for bad in ("", "päss", "two\nlines"):
        with pytest.raises(InvalidInputError, match="printable ASCII"):
            read_password(None, bad, "api")
    secret = scram_verifier("s3cret word")
    assert verifier_matches(secret, "s3cret word") and not verifier_matches(secret, "s3cret")
    assert not verifier_matches(None, "s3cret word") and not verifier_matches("md5abc", "x")


@pytest.mark.parametrize("command", ["roles", "grants"])
def test_a_sqlite_database_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    result = run_cli(capsys, "db", command, "--db", f"sqlite:///{tmp_path / 'x.sqlite'}")
    assert result.code == 1
    assert result.err.strip().splitlines() == [
        f"error: sqlite:///{tmp_path / 'x.sqlite'}: sqlite has no roles; roles and grants are "
        "for PostgreSQL"
    ]


# --- the roles as created ---------------------------------------------------------------------


def test_no_role_is_more_than_a_login(deployment: Deployment) -> None:
    names = deployment.names
    with deployment.engines["admin"].connect() as conn:
        rows = conn.execute(
            text(
                "SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolreplication, "
                "rolbypassrls, rolcanlogin FROM pg_roles WHERE rolname = ANY(:n)"
            ),
            {"n": list(names.all)},
        ).all()
        assert sorted(tuple(r) for r in rows) == sorted(
            (n, False, False, False, False, False, True) for n in names.all
        )
        members = conn.execute(
            text(
                "SELECT count(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member "
                "WHERE r.rolname = ANY(:n)"
            ),
            {"n": list(names.all)},
        ).scalar_one()
        assert members == 0
        owners = conn.execute(
            text(
                "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public' "
                "AND tablename = ANY(:t)"
            ),
            {"t": list(GRANTS)},
        ).scalars()
        assert list(owners) == [names.owner]
        rights = {
            name: conn.execute(
                text(
                    "SELECT has_schema_privilege(:r, 'public', 'CREATE'), "
                    "has_database_privilege(:r, current_database(), 'CREATE'), "
                    "has_database_privilege(:r, current_database(), 'TEMPORARY'), "
                    "has_database_privilege(:r, current_database(), 'CONNECT')"
                ),
                {"r": name},
            ).one()
            for name in names.all
        }
        assert rights == {
            names.owner: (True, False, False, True),
            names.api: (False, False, False, True),
            names.worker: (False, False, False, True),
        }


def test_api_and_worker_hold_no_owner_privilege_on_any_table(deployment: Deployment) -> None:
    names = deployment.names
    with deployment.engines["admin"].connect() as conn:
        held = conn.execute(
            text(
                "SELECT r, t, p FROM unnest(CAST(:roles AS text[])) r, unnest(CAST(:tables AS "
                "text[])) t, unnest(ARRAY['TRUNCATE', 'REFERENCES', 'TRIGGER']) p "
                "WHERE has_table_privilege(r, 'public.' || t, p)"
            ),
            {"roles": [names.api, names.worker], "tables": list(GRANTS)},
        ).all()
    assert held == []


def test_the_sequences_granted_are_the_serial_ids(deployment: Deployment) -> None:
    with deployment.engines["admin"].connect() as conn:
        owned = conn.execute(
            text(
                "SELECT t.relname, s.relname FROM pg_class s JOIN pg_depend d ON d.objid = s.oid "
                "AND d.deptype = 'a' JOIN pg_class t ON t.oid = d.refobjid WHERE s.relkind = 'S'"
            )
        ).all()
    expected = {t: serial_sequence(t) for t in GRANTS if serial_sequence(t) is not None}
    assert dict(owned) == expected


def _catalog(conn: Any, names: RoleNames) -> dict[str, Any]:
    """What the roles, the database, the schema and the tables say of privileges."""
    return {
        "tables": conn.execute(
            text(
                "SELECT c.relname, pg_get_userbyid(c.relowner), ARRAY(SELECT a::text FROM "
                "unnest(coalesce(c.relacl, '{}')) a ORDER BY 1) FROM pg_class c JOIN "
                "pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
                "ORDER BY 1"
            )
        ).all(),
        "columns": conn.execute(
            text(
                "SELECT attrelid::regclass::text, attname, ARRAY(SELECT a::text FROM "
                "unnest(attacl) a ORDER BY 1) FROM pg_attribute WHERE attacl IS NOT NULL "
                "ORDER BY 1, 2"
            )
        ).all(),
        "schema": conn.execute(
            text("SELECT nspacl::text[] FROM pg_namespace WHERE nspname = 'public'")
        ).all(),
        "database": conn.execute(
            text("SELECT datacl::text[] FROM pg_database WHERE datname = current_database()")
        ).all(),
        "roles": conn.execute(
            text(
                "SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolcanlogin, "
                "rolpassword FROM pg_authid WHERE rolname = ANY(:n) ORDER BY 1"
            ),
            {"n": list(names.all)},
        ).all(),
    }


def test_running_the_commands_again_changes_nothing(deployment: Deployment) -> None:
    names, urls = deployment.names, deployment.urls
    with deployment.engines["admin"].connect() as conn:
        before = _catalog(conn, names)
    assert all(r[-1].startswith("SCRAM-SHA-256$4096:") for r in before["roles"])
    roles = ["--owner", names.owner, "--api", names.api, "--worker", names.worker]
    files = deployment.password_files
    pairs = [(f"--{kind}-password-file", str(files[kind])) for kind in KINDS]
    _opdb("db", "roles", "--db", urls["admin"], *roles, *[x for pair in pairs for x in pair])
    _opdb("db", "grants", "--db", urls["owner"], "--api", names.api, "--worker", names.worker)
    with deployment.engines["admin"].connect() as conn:
        assert _catalog(conn, names) == before


def test_the_printed_sql_sets_up_the_same(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    """What an init script would run: the roles' SQL, then the grants' (as the owner)."""
    names, urls = deployment.names, deployment.urls
    with deployment.engines["admin"].connect() as conn:
        before = _catalog(conn, names)
    roles = ["--owner", names.owner, "--api", names.api, "--worker", names.worker]
    roles_sql = run_cli(capsys, "db", "roles", "--print-sql", *roles)
    grants_sql = run_cli(capsys, "db", "grants", "--print-sql", *roles[2:])
    assert roles_sql.code == grants_sql.code == 0
    with deployment.engines["owner"].begin() as conn:  # take every grant away first
        conn.exec_driver_sql(
            f'REVOKE ALL ON ALL TABLES IN SCHEMA public FROM "{names.api}", "{names.worker}"'
        )
        conn.exec_driver_sql(
            f'REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM "{names.api}", "{names.worker}"'
        )
    for role, sql in (("admin", roles_sql.out), ("owner", grants_sql.out)):
        url = make_url(urls[role]).set(drivername="postgresql").render_as_string(False)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.encode())
    with deployment.engines["admin"].connect() as conn:
        assert _catalog(conn, names) == before


def test_the_password_secret_is_libpqs(deployment: Deployment) -> None:
    with deployment.engines["admin"].connect() as conn:
        pgconn = conn.connection.driver_connection.pgconn  # type: ignore[union-attr]
        secret = pgconn.encrypt_password(b"pa55 word!", b"someone", b"scram-sha-256").decode()
        stored = conn.execute(
            text("SELECT rolpassword FROM pg_authid WHERE rolname = :n"),
            {"n": deployment.names.api},
        ).scalar_one()
    assert verifier_matches(secret, "pa55 word!") and not verifier_matches(secret, "pa55 word")
    api_password = deployment.password_files["api"].read_text().strip()
    assert verifier_matches(stored, api_password)


def test_connected_as_one_of_the_roles_the_command_refuses(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    names = deployment.names
    roles = ["--owner", names.owner, "--api", names.api, "--worker", names.worker]
    result = run_cli(capsys, "db", "roles", "--db", deployment.urls["owner"], *roles)
    assert result.code == 1
    assert f"connected as {names.owner}, one of the roles to set up" in result.err


@contextlib.contextmanager
def _other_names(suffix: str) -> Iterator[RoleNames]:
    """Role names of their own for one test; the roles are dropped after its database."""
    stem = f"{_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:6]}_{suffix}"
    names = RoleNames(owner=f"{stem}_owner", api=f"{stem}_api", worker=f"{stem}_worker")
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        yield names
    finally:
        with admin.connect() as conn:
            for name in (*names.all, f"{stem}_admin"):
                conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{name}"')
        admin.dispose()


def _role_flags(names: RoleNames) -> list[str]:
    return ["--owner", names.owner, "--api", names.api, "--worker", names.worker]


def test_an_earlier_deployments_tables_go_to_the_owner(
    deployment: Deployment, request: pytest.FixtureRequest
) -> None:
    """A database its superuser migrated (before the roles): `opdb db roles` alone moves it."""
    template = request.getfixturevalue("postgres_template")
    with _other_names("old") as names:
        for url in _fresh_postgres(template):
            _opdb("db", "roles", "--db", url, *_role_flags(names))
            engine = create_engine(url)
            try:
                with engine.connect() as conn:
                    owners = conn.execute(
                        text(
                            "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'"
                        )
                    ).scalars()
                    assert list(owners) == [names.owner]
                    granted = conn.execute(
                        text("SELECT has_table_privilege(:r, 'public.measurements', 'INSERT')"),
                        {"r": names.worker},
                    ).scalar_one()
                    assert granted
            finally:
                engine.dispose()


def test_an_admin_with_createrole_that_owns_the_database_sets_up(deployment: Deployment) -> None:
    """No superuser needed for a new database: CREATEROLE and the database's ownership do."""
    with _other_names("cr") as names:
        admin_name = names.owner.removesuffix("_owner") + "_admin"
        with deployment.engines["admin"].connect() as conn:
            conn.exec_driver_sql(f'CREATE ROLE "{admin_name}" LOGIN CREATEROLE')
            conn.commit()
        for url in _fresh_postgres(None):
            database = make_url(url).database
            with deployment.engines["admin"].connect() as conn:
                conn.exec_driver_sql(f'ALTER DATABASE "{database}" OWNER TO "{admin_name}"')
                conn.commit()
            _opdb("db", "roles", "--db", _url(url, admin_name), *_role_flags(names))
            _opdb("db", "upgrade", "--db", _url(url, names.owner))
            _opdb("db", "grants", "--db", _url(url, names.owner), *_role_flags(names)[2:])
            with Store.open(_url(url, names.worker)) as store, store.transaction() as session:
                assert queries.get_or_create_device_kind(session, "fake:Admin").id == 1


# --- what each role does: enough -------------------------------------------------------------


def test_the_api_and_a_worker_do_their_work_under_their_roles(deployment: Deployment) -> None:
    spec = (EXAMPLE_SPECS / "mlp-small-b8.yaml").read_text()
    device = FakeDevice(update_period_s=0.001)
    interleaved = FakeDevice(name="Interleaved", update_period_s=0.001)
    kind = device.identity().name
    api_url = deployment.urls["api"]
    with api_client(api_url) as api:
        stored = api.post("/specs", params={"name": "mlp.yaml"}, content=spec, headers=AUTH)
        assert stored.status_code == 201, stored.text
        queued = api.post("/models/mlp-small-b8/jobs", json={"device_kind": kind}, headers=AUTH)
        assert queued.status_code == 201, queued.text
        assert queued.json()["queued_configs"] == 4 and queued.json()["queued_model_run"]
        # One interleaved job on a kind of its own: the model and its operators in one insert.
        both = {"device_kind": interleaved.identity().name, "interleaved": True}
        assert api.post("/models/mlp-small-b8/jobs", json=both, headers=AUTH).status_code == 201
    with Store.open(deployment.urls["worker"]) as store:
        # The second run registers its host again (an update) and finds nothing to do.
        for on, expected in ((device, 5), (device, 0), (interleaved, 1)):
            stats = Worker(
                store,
                on,
                fast_settings(model_min_time_s=0.01),
                WorkerOptions(until_idle=True, poll_s=0.01),
            ).run()
            assert (stats.done, stats.failed, stats.lost, stats.errors) == (expected, 0, 0, [])
    with api_client(api_url) as api:
        for on in (device, interleaved):
            params = {"device_kind": on.identity().name}
            estimate = api.get("/models/mlp-small-b8/estimate", params=params)
            assert estimate.status_code == 200, estimate.text
            assert estimate.json()["coverage"] == 1.0 and estimate.json()["time_s"] > 0
        _every_read_answers(api, kind)
        changed = spec.replace("description: A 784", "description: Changed, a 784")
        replaced = api.post("/specs", params={"name": "x.yaml"}, content=changed, headers=AUTH)
        assert replaced.status_code == 201 and replaced.json()["status"] == "replaced"
        other = {"device_kind": "fake:Other"}
        assert api.post("/models/mlp-small-b8/jobs", json=other, headers=AUTH).status_code == 201
        queued = api.get("/jobs", params={"status": "queued"}).json()["items"]
        job = next(j for j in queued if j["target"] == "operator")
        cancelled = api.post(f"/jobs/{job['id']}/cancel", headers=AUTH)
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        assert api.delete("/models/mlp-small-b8", headers=AUTH).status_code == 204
        # The model's own jobs went with it (the database's cascade); its operators' stay.
        assert api.get("/jobs/counts").json() == {"cancelled": 1, "done": 4, "queued": 3}


def _every_read_answers(api: Any, kind: str) -> None:
    """Every GET of the API answers without a server error (a refused read would be a 5xx)."""
    key = api.get("/configurations").json()["items"][0]["key"]
    job_id = api.get("/jobs").json()["items"][0]["id"]
    values = {"name": "mlp-small-b8", "key": key, "job_id": str(job_id)}
    paths = api.get("/openapi.json").json()["paths"]
    for path, operations in paths.items():
        if "get" not in operations or path == "/metrics":
            continue
        url = path
        for name, value in values.items():
            url = url.replace("{" + name + "}", value)
        if path.startswith("/device-kinds/"):
            url = path.replace("{name}", kind)
        for params in ({"device_kind": kind}, {"device_kind": kind, "predict": "true"}):
            response = api.get(url, params=params)
            assert response.status_code < 500, (url, response.text)
    assert api.get("/metrics").status_code < 500
    assert api.get("/ui").status_code < 500


def test_the_worker_role_takes_every_step_of_a_job(deployment: Deployment) -> None:
    spec = parse_spec(spec_dict("steps", [linear_op(), relu_op([4, 32])]), "steps.yaml")
    with Store.open(deployment.urls["api"]) as api, api.transaction() as session:
        ingest_specs(session, [spec])
        queue.enqueue_model(session, "steps", "fake:Steps", max_attempts=5)
    with Store.open(deployment.urls["worker"]) as store:

        def step(action: Any) -> Any:
            with store.transaction() as session:
                return action(session)

        kind_id = step(lambda s: queries.get_device_kind(s, "fake:Steps").id)
        model_id = step(lambda s: queries.get_model(s, "steps").id)

        def claim(s: Any) -> int:
            job = queue.claim_job(s, kind_id, "w", lease_s=60, model_ids=[model_id])
            assert job is not None
            return job.id

        job_id = step(claim)
        assert step(lambda s: queue.renew_lease(s, job_id, "w", 60))
        assert step(lambda s: queue.fail_job(s, job_id, "w", "boom")) == "queued"
        job_id = step(claim)
        assert step(lambda s: queue.release_job(s, job_id, "w"))
        job_id = step(claim)
        assert step(lambda s: queue.finish_job(s, job_id, "w"))
        assert step(queue.expire_exhausted) == 0
        assert step(lambda s: queue.job_target_name(s, queue.get_job(s, job_id)))


# --- what each role does not: refused --------------------------------------------------------

EVERYONE_ELSE = [
    ("create-table", "CREATE TABLE evil (i int)"),
    ("create-function", "CREATE FUNCTION public.evil() RETURNS int LANGUAGE sql AS 'SELECT 1'"),
    ("create-temp-table", "CREATE TEMP TABLE evil (i int)"),
    ("create-schema", "CREATE SCHEMA evil"),
    ("drop-table", "DROP TABLE jobs"),
    ("alter-table", "ALTER TABLE jobs ADD COLUMN evil int"),
    ("truncate", "TRUNCATE measurements"),
    ("delete-jobs", "DELETE FROM jobs"),
    ("delete-device-kinds", "DELETE FROM device_kinds"),
    ("delete-measurements", "DELETE FROM measurements"),
    ("update-measurements", "UPDATE measurements SET time_median_s = 0"),
    ("insert-device-peaks", "INSERT INTO device_peaks (device_kind_id, source) VALUES (1, 'spec')"),
    ("insert-predictors", "INSERT INTO predictors (device_kind_id) VALUES (1)"),
    ("update-job-priority", "UPDATE jobs SET priority = 100"),
    ("update-job-options", "UPDATE jobs SET options = '{}'"),
    ("update-alembic-version", "UPDATE alembic_version SET version_num = 'evil'"),
    ("delete-alembic-version", "DELETE FROM alembic_version"),
    ("copy-to-program", "COPY (SELECT 1) TO PROGRAM 'true'"),
    ("copy-to-file", "COPY (SELECT 1) TO '/tmp/opdb-evil'"),
    ("read-server-file", "SELECT pg_read_file('/etc/passwd')"),
    ("create-role", "CREATE ROLE evil"),
    ("set-role-owner", "SET ROLE {owner}"),
]
"""Refused to the API and the worker alike."""

API_ONLY = [
    ("insert-measurements", "INSERT INTO measurements (config_id) VALUES (1)"),
    ("insert-full-model-runs", "INSERT INTO full_model_runs (model_id) VALUES (1)"),
    ("insert-hosts", "INSERT INTO hosts (hostname) VALUES ('evil')"),
    ("update-hosts", "UPDATE hosts SET info = '{}'"),
    ("update-model-name", "UPDATE models SET name = 'evil'"),
    ("update-operator-configs", "UPDATE operator_configs SET flops = 0"),
    ("delete-operator-configs", "DELETE FROM operator_configs"),
    ("set-role-worker", "SET ROLE {worker}"),
]

WORKER_ONLY = [
    ("insert-models", "INSERT INTO models (name) VALUES ('evil')"),
    ("insert-operator-configs", "INSERT INTO operator_configs (key) VALUES ('evil')"),
    ("insert-model-operators", "INSERT INTO model_operators (model_id) VALUES (1)"),
    ("insert-jobs", "INSERT INTO jobs (target) VALUES ('operator')"),
    ("update-models", "UPDATE models SET reference = 'evil'"),
    ("update-job-target", "UPDATE jobs SET config_id = 1"),
    ("update-device-kind-name", "UPDATE device_kinds SET name = 'evil'"),
    ("delete-models", "DELETE FROM models"),
    ("delete-model-operators", "DELETE FROM model_operators"),
    ("delete-full-model-runs", "DELETE FROM full_model_runs"),
    ("read-figures", "SELECT time_median_s FROM measurements"),
    ("read-predictors", "SELECT id FROM predictors"),
    ("set-role-api", "SET ROLE {api}"),
]

OWNER = [
    ("create-role", "CREATE ROLE evil"),
    ("create-database", "CREATE DATABASE evil"),
    ("create-schema", "CREATE SCHEMA evil"),
    ("alter-role-superuser", "ALTER ROLE {owner} SUPERUSER"),
    ("copy-to-program", "COPY (SELECT 1) TO PROGRAM 'true'"),
    ("copy-to-file", "COPY (SELECT 1) TO '/tmp/opdb-evil'"),
    ("read-server-file", "SELECT pg_read_file('/etc/passwd')"),
    ("set-role-api", "SET ROLE {api}"),
]

REFUSED = [
    pytest.param(role, sql, id=f"{role}-{name}")
    for role, cases in (
        ("api", EVERYONE_ELSE + API_ONLY),
        ("worker", EVERYONE_ELSE + WORKER_ONLY),
        ("owner", OWNER),
    )
    for name, sql in cases
]


@pytest.mark.parametrize(("role", "sql"), REFUSED)
def test_refused(deployment: Deployment, role: str, sql: str) -> None:
    names = deployment.names
    statement = sql
    for kind in KINDS:
        statement = statement.replace("{" + kind + "}", getattr(names, kind))
    engine = deployment.engines[role]
    if statement.startswith("CREATE DATABASE"):  # not in a transaction block, whoever asks
        engine = engine.execution_options(isolation_level="AUTOCOMMIT")
    with engine.connect() as conn, pytest.raises(DBAPIError) as refused:
        conn.exec_driver_sql(statement)
    assert isinstance(refused.value.orig, pg_errors.InsufficientPrivilege), refused.value
    assert re.search(r"permission denied|must be (owner|superuser)", str(refused.value.orig))
