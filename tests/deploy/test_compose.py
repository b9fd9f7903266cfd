"""docker/compose.yaml and the Dockerfiles: structure only (Docker does not run here).

The settings the services get are checked against ``operator_db.config.Settings`` itself, so a
renamed or removed setting fails here instead of being ignored silently in a container.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml

from operator_db.config import ENV_PREFIX, Settings
from operator_db.config_env import variable_names
from operator_db.db.roles import DEFAULT_NAMES, KINDS
from tests.helpers import load_lockfile

ROOT = Path(__file__).resolve().parents[2]
lockfile = load_lockfile()
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
PREFIX = ENV_PREFIX


VALID = variable_names(Settings, PREFIX)
REQUIRED = {f"{PREFIX}{n}".upper() for n, f in Settings.model_fields.items() if f.is_required()}
_VARIABLE = re.compile(r"\$\{(\w+)(?::?([-?])([^}]*))?\}")


def interpolate(value: str) -> str:
    """Replace compose's ``${NAME}`` and ``${NAME:?error}`` with test values, and
    ``${NAME:-default}`` with its default (what compose gives where NAME is unset)."""
    return _VARIABLE.sub(
        lambda m: m.group(3) if m.group(2) == "-" else f"test-{m.group(1).lower()}", value
    )


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = compose["services"]
    assert isinstance(found, dict)
    return found


def dockerfile(service: dict[str, Any]) -> Path | None:
    """The Dockerfile a service builds, resolved as compose does (context from the file's dir)."""
    build = service.get("build")
    if build is None:
        return None
    context = (COMPOSE.parent / build["context"]).resolve()
    return (context / build.get("dockerfile", "Dockerfile")).resolve()


def built_from(services: dict[str, dict[str, Any]], name: str) -> dict[str, dict[str, Any]]:
    return {s: svc for s, svc in services.items() if dockerfile(svc) == DOCKER / name}


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the KEY=value form
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def argv(command: str | list[str]) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def test_setting_names_come_from_the_settings_themselves() -> None:
    assert {"OPDB_DATABASE_URL", "OPDB_API_TOKEN_FILE", "OPDB_DEVICE"} <= VALID
    assert "OPDB_MEASURE__THREADS" in VALID
    assert "OPDB_MEASURE__NO_SUCH_SETTING" not in VALID
    assert "OPDB_THREADS" not in VALID


def test_the_compose_file_parses_with_its_services(services: dict[str, dict[str, Any]]) -> None:
    assert {"postgres", "migrate", "api", "worker"} <= set(services)


ROLE_PASSWORDS = {f"OPDB_ROLES_{kind.upper()}_PASSWORD_FILE" for kind in KINDS}
"""What `opdb db roles` reads besides the settings: each role's password, from a file."""


def test_services_name_only_settings_the_code_defines(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        env = environment(service)
        extra = (
            ROLE_PASSWORDS
            if argv(service.get("command", []))[:3] == ["opdb", "db", "roles"]
            else set()
        )
        unknown = {k for k in env if k.startswith(PREFIX) and k not in VALID | extra}
        assert not unknown, f"{name}: no such setting: {sorted(unknown)}"
        if dockerfile(service) is not None:  # ours: settings only, and only OPDB_ ones
            assert all(k.startswith(PREFIX) for k in env), f"{name}: {sorted(env)}"


def test_each_service_of_ours_gets_the_required_settings_and_the_database(
    services: dict[str, dict[str, Any]],
) -> None:
    ours = {n: s for n, s in services.items() if dockerfile(s) is not None}
    assert {"migrate", "api", "worker"} <= set(ours)
    for name, service in ours.items():
        env = environment(service)
        assert set(env) >= REQUIRED, f"{name} lacks {sorted(REQUIRED - set(env))}"
        # The default is a SQLite file inside one container: every service needs the shared one.
        url = interpolate(env["OPDB_DATABASE_URL"])
        assert url.startswith("postgresql+psycopg://"), name
        assert "@postgres:5432/" in url, name


def test_the_services_settings_are_valid_values(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("t\n", encoding="utf-8")
    for name, service in services.items():
        if dockerfile(service) is None:
            continue
        env = {  # a secret file here for each /run/secrets/ file the container would read
            key: str(secret) if key.endswith("_FILE") else interpolate(value)
            for key, value in environment(service).items()
        }
        with monkeypatch.context() as patch:
            for key in VALID:
                patch.delenv(key, raising=False)
            for key, value in env.items():
                patch.setenv(key, value)
            settings = Settings(_env_file=None)  # type: ignore[call-arg]
        # The URL as written, with the password of its file put in.
        assert settings.database_url == env["OPDB_DATABASE_URL"].replace("@", ":t@", 1), name


def test_postgres_keeps_its_data_and_says_when_it_is_ready(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    postgres = services["postgres"]
    assert postgres["image"].startswith("postgres:")
    volume, target = postgres["volumes"][0].split(":")[:2]
    assert target == "/var/lib/postgresql/data"
    assert volume in compose["volumes"]
    assert "pg_isready" in " ".join(argv(postgres["healthcheck"]["test"]))


def database_url(service: dict[str, Any]) -> Any:
    """The service's database URL, parsed (compose's variables filled with test values)."""
    return urlsplit(interpolate(environment(service)["OPDB_DATABASE_URL"]))


def test_roles_then_migrations_once_postgres_is_healthy(
    services: dict[str, dict[str, Any]],
) -> None:
    """The superuser only creates the roles; the owner migrates and grants; both run once."""
    roles, migrate = services["roles"], services["migrate"]
    assert argv(roles["command"]) == ["opdb", "db", "roles"]
    assert roles["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert database_url(roles).username == "postgres"
    assert set(environment(roles)) >= ROLE_PASSWORDS
    assert argv(migrate["command"]) == ["sh", "-c", "opdb db upgrade && opdb db grants"]
    assert migrate["depends_on"]["roles"]["condition"] == "service_completed_successfully"
    assert database_url(migrate).username == DEFAULT_NAMES["owner"]
    for service in (roles, migrate):
        assert dockerfile(service) == DOCKER / "api.Dockerfile"
        assert service.get("restart", "no") == "no"


def test_each_service_connects_as_its_own_role_over_verified_tls(
    services: dict[str, dict[str, Any]],
) -> None:
    """No service but `roles` is the superuser; every connection checks the server's certificate."""
    expected = {"api": "api", "worker": "worker", "migrate": "owner"}
    for name, service in services.items():
        if dockerfile(service) is None:
            continue
        url = database_url(service)
        query = dict(parse_qsl(url.query))
        assert query["sslmode"] == "verify-full", name
        secret = query["sslrootcert"].removeprefix("/run/secrets/")
        assert secret in service["secrets"], name
        kind = (
            "worker" if dockerfile(service) == DOCKER / "worker.Dockerfile" else expected.get(name)
        )
        if kind is not None:
            assert url.username == DEFAULT_NAMES[kind], name


def test_postgres_speaks_tls_only_and_publishes_on_localhost(
    services: dict[str, dict[str, Any]],
) -> None:
    postgres = services["postgres"]
    command = " ".join(argv(postgres["command"]))
    assert "-c ssl=on" in command
    assert "-c hba_file=/etc/opdb/pg_hba.conf" in command
    hba = [
        line.split()
        for line in (DOCKER / "pg_hba.conf").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert [row[0] for row in hba] == ["local", "hostssl", "host"]
    assert hba[-1][-1] == "reject", "TCP without TLS must be refused"
    assert "${POSTGRES_PUBLISH:-127.0.0.1:5432}" in postgres["ports"][0]
    assert "${API_PUBLISH:-127.0.0.1:8000}" in services["api"]["ports"][0]


def test_api_waits_for_the_migrations_and_checks_health(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    api = services["api"]
    assert dockerfile(api) == DOCKER / "api.Dockerfile"
    assert api["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    command = argv(api["command"])
    assert command[:2] == ["opdb", "serve"]
    host, port = command[command.index("--host") + 1], command[command.index("--port") + 1]
    assert host == "0.0.0.0"
    check = " ".join(argv(api["healthcheck"]["test"]))
    assert f"http://127.0.0.1:{port}/health" in check
    assert any(str(p).endswith(f":{port}") for p in api["ports"])
    # The write token: from a secret file that the service mounts and compose defines.
    env = environment(api)
    assert "OPDB_API_TOKEN" in env or "OPDB_API_TOKEN_FILE" in env
    if "OPDB_API_TOKEN_FILE" in env:
        secret = env["OPDB_API_TOKEN_FILE"].removeprefix("/run/secrets/")
        assert secret in api["secrets"]
        assert "file" in compose["secrets"][secret]


def test_each_worker_has_its_own_gpu_and_restarts_on_failure(
    services: dict[str, dict[str, Any]],
) -> None:
    workers = built_from(services, "worker.Dockerfile")
    assert "worker" in workers
    gpus: list[str] = []
    for name, worker in workers.items():
        devices = worker["deploy"]["resources"]["reservations"]["devices"]
        assert len(devices) == 1, name
        assert devices[0]["driver"] == "nvidia"
        assert "gpu" in devices[0]["capabilities"]
        assert len(devices[0]["device_ids"]) == 1, f"{name}: one worker per GPU"
        gpus += [str(i) for i in devices[0]["device_ids"]]
        assert environment(worker).get("OPDB_DEVICE", "nvidia:0") == "nvidia:0"
        assert worker["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        # Exit 75 must start it again, exit 0 must not: on-failure, not always/unless-stopped.
        policy = worker.get("deploy", {}).get("restart_policy", {}).get("condition")
        restart = str(worker.get("restart", ""))
        assert restart.split(":")[0] == "on-failure" or policy == "on-failure", name
        assert restart not in ("always", "unless-stopped"), name
    assert len(gpus) == len(set(gpus)), f"two workers on one GPU: {gpus}"


def test_the_dockerfiles_exist_and_are_built(services: dict[str, dict[str, Any]]) -> None:
    built = {dockerfile(s) for s in services.values()} - {None}
    assert built == {DOCKER / "api.Dockerfile", DOCKER / "worker.Dockerfile"}
    for path in built:
        assert path is not None and path.is_file()
        assert (path.parent.parent / ".dockerignore").is_file()


def instructions(path: Path) -> list[tuple[str, str]]:
    """A Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", path.read_text(encoding="utf-8"))
    rows = [line.strip() for line in text.splitlines()]
    return [
        (row.split(maxsplit=1)[0].upper(), row.split(maxsplit=1)[1])
        for row in rows
        if row and not row.startswith("#")
    ]


def last(path: Path, keyword: str) -> str:
    return [args for key, args in instructions(path) if key == keyword][-1]


def test_api_image_serves_on_all_addresses_as_a_user_with_a_health_check() -> None:
    path = DOCKER / "api.Dockerfile"
    assert argv(yaml.safe_load(last(path, "CMD")))[:2] == ["opdb", "serve"]
    assert "0.0.0.0" in last(path, "CMD")
    assert "/health" in last(path, "HEALTHCHECK")
    assert last(path, "EXPOSE") == "8000"
    assert last(path, "USER").split(":")[0] not in ("root", "0")
    assert "download.pytorch.org/whl/cpu" in path.read_text(encoding="utf-8")


def test_worker_image_runs_opdb_worker_as_a_user_on_cuda() -> None:
    path = DOCKER / "worker.Dockerfile"
    assert yaml.safe_load(last(path, "ENTRYPOINT")) == ["opdb", "worker"]
    assert last(path, "USER").split(":")[0] not in ("root", "0")
    assert "nvidia/cuda:" in path.read_text(encoding="utf-8")


def arg_defaults(path: Path) -> dict[str, str]:
    """A Dockerfile's ``ARG NAME=default`` values."""
    found = {}
    for key, args in instructions(path):
        if key == "ARG" and "=" in args:
            name, value = args.split("=", 1)
            found[name.strip()] = value.strip()
    return found


def with_defaults(text: str, defaults: dict[str, str]) -> str:
    """``text`` with ``${NAME}`` and ``$NAME`` replaced by the ARG defaults."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: defaults.get(m.group(1), m.group(0)), text)


DOCKERFILES = sorted(DOCKER.glob("*.Dockerfile"))


@pytest.mark.parametrize(("image", "lock"), [("api", "runtime"), ("worker", "worker")])
def test_images_install_exactly_the_lock(image: str, lock: str) -> None:
    """The lock's file for the image, hashes checked and nothing resolved; the project after it."""
    runs = " ".join(a for k, a in instructions(DOCKER / f"{image}.Dockerfile") if k == "RUN")
    runs = re.sub(r"\$\{\w+:\+[^}]*\}\s*", "", runs)  # ${UV_NO_INDEX:+--no-index}
    assert f"--no-deps --require-hashes -r /tmp/{lock}.txt" in runs
    assert "--no-deps /tmp/dist/operator_db-*.whl" in runs
    assert "pip check" in runs


@pytest.mark.parametrize(("image", "torch"), [("api", "torch-cpu"), ("worker", "torch-cuda")])
def test_torch_is_installed_by_its_hash(image: str, torch: str) -> None:
    """torch comes from a lock file of its own, every file by sha256, at constraints.txt's pin."""
    path = DOCKER / f"{image}.Dockerfile"
    assert arg_defaults(path)["TORCH_REQUIREMENTS"] == f"requirements/{torch}.txt"
    runs = " ".join(a for k, a in instructions(path) if k == "RUN")
    assert re.search(r"--no-deps --require-hashes .*-r /tmp/torch\.txt", runs)
    pin = (ROOT / "constraints.txt").read_text(encoding="utf-8")
    version = re.search(r"^torch==(\S+)", pin, re.MULTILINE)
    assert version is not None
    # read_lock refuses a requirement that is not name==version with its hashes.
    pins = {p.name: p for p in lockfile.read_lock(ROOT / "requirements" / f"{torch}.txt")}
    assert pins["torch"].version.split("+")[0] == version.group(1)
    hashes = [h for p in pins.values() for h in p.hashes]
    assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), hashes


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_pulled_base_images_are_pinned_by_digest(path: Path) -> None:
    """Every image a build pulls by default is named by digest; a local one (localhost/) is made."""
    defaults = arg_defaults(path)
    for key, args in instructions(path):
        if key != "FROM":
            continue
        image = with_defaults(args.split()[0], defaults)
        if image in {"scratch"} or image.startswith("localhost/") or image in stages(path):
            continue
        assert re.search(r"@sha256:[0-9a-f]{64}$", image), f"{path.name}: FROM {image}"


def stages(path: Path) -> set[str]:
    """The names of a Dockerfile's build stages (``FROM x AS name``)."""
    return {a.split()[-1] for k, a in instructions(path) if k == "FROM" and " AS " in a.upper()}


def test_the_build_context_keeps_what_the_dockerfiles_copy() -> None:
    kept = {
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.startswith("!")
    }
    for path in DOCKERFILES:
        defaults = arg_defaults(path)
        for key, args in instructions(path):
            if key != "COPY" or args.startswith("--from"):
                continue
            sources = with_defaults(args, defaults).split()[:-1]
            for source in sources:  # kept itself, or inside a kept folder
                parts = Path(source.rstrip("/")).parts
                assert any("/".join(parts[:n]) in kept for n in range(1, len(parts) + 1)), (
                    f"{path.name}: COPY {args}"
                )
            assert all((ROOT / s).exists() for s in sources), f"{path.name}: COPY {args}"


def test_secret_values_are_not_in_the_compose_file(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for key, value in environment(service).items():
            secret = any(w in key for w in ("TOKEN", "PASSWORD")) and not key.endswith("_FILE")
            assert not secret or value.startswith("${"), f"{name}: {key} is written out"


def test_compose_passwords_are_secret_files_not_variables(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    """Finding: compose's passwords were environment variables, interpolated into database URLs
    (seen by `docker inspect`, every process of the container, and its crash reports)."""
    for name, service in services.items():
        env = environment(service)
        for key, value in env.items():
            assert "PASSWORD" not in key or key.endswith("_FILE"), f"{name}: {key}"
            assert "PASSWORD" not in value, f"{name}: {key} interpolates a password"
            if key.endswith("_FILE") and value.startswith("/run/secrets/"):
                secret = value.removeprefix("/run/secrets/")
                assert secret in service["secrets"], f"{name}: {secret} is not mounted"
                assert compose["secrets"][secret]["file"] == f"./secrets/{secret}"
        if "OPDB_DATABASE_URL" in env:
            url = urlsplit(interpolate(env["OPDB_DATABASE_URL"]))
            assert url.username and url.password is None, name
            assert env["OPDB_DATABASE_PASSWORD_FILE"].startswith("/run/secrets/"), name
    assert "POSTGRES_PASSWORD" not in environment(services["postgres"])
    assert environment(services["postgres"])["POSTGRES_PASSWORD_FILE"] == (
        "/run/secrets/postgres_password"
    )
    # The superuser's password is the one file the database and the roles service share.
    roles = environment(services["roles"])
    assert roles["OPDB_DATABASE_PASSWORD_FILE"] == "/run/secrets/postgres_password"


def test_the_api_is_confined(services: dict[str, dict[str, Any]]) -> None:
    """Compose gave the API no memory or pids limit, no read-only root, every capability."""
    api = services["api"]
    assert api["read_only"] is True and any(t.startswith("/tmp") for t in api["tmpfs"])
    assert api["cap_drop"] == ["ALL"] and "no-new-privileges:true" in api["security_opt"]
    assert api["mem_limit"] and int(api["pids_limit"]) > 0
    image = (ROOT / "docker" / "api.Dockerfile").read_text(encoding="utf-8")
    assert "MPLCONFIGDIR=/tmp/" in image  # matplotlib's cache where the root is not writable
