"""The compose stack, built and run for real: scripts/images.sh --smoke.

PostgreSQL, the roles, the migrations, the API and a worker on the fake device, from
docker/compose.yaml (tests/deploy/stack.py), then from outside the containers: a spec ingested
over REST, measured by the worker, its estimate read and /ui/ opened; the worker's container
killed in the middle of a job and started again; PostgreSQL's container restarted while the API is
asked; the roles' limits and TLS tried from the host.

It needs images (scripts/images.sh builds them: 8 min cold, seconds cached) and podman or docker:
it runs when ``OPDB_TEST_IMAGES=1``, which ``bash scripts/images.sh --smoke`` sets after building
them; ``bash scripts/test.sh`` (and so CI) runs that last, after the rest of the suite, where this
module is skipped. Each figure it measures (time from ``up`` to the first answer, the kill, the
restart) is written to ``$OPDB_IMAGES_REPORT`` when set.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.deploy.stack import COMPOSE, ROOT, Stack, overrides, published

pytestmark = pytest.mark.skipif(
    os.environ.get("OPDB_TEST_IMAGES") != "1",
    reason="builds and runs the images: bash scripts/images.sh --smoke (last in scripts/test.sh)",
)
# Read at import: the suite's fixtures give each test a clean environment.
ENGINE = os.environ.get("OPDB_IMAGES_ENGINE", "podman")
COMPOSE_TOOL = os.environ.get("OPDB_PODMAN_COMPOSE", "podman-compose")
IMAGES = {
    "tag": os.environ.get("OPDB_IMAGES_TAG", "latest"),
    "postgres": os.environ.get("OPDB_IMAGES_POSTGRES", ""),
    "report": os.environ.get("OPDB_IMAGES_REPORT", ""),
}
KIND = "fake:FakeGPU"
REPORT: dict[str, Any] = {}


def http(
    method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request; (status, headers, body) for any HTTP answer. A dropped connection raises."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


PASSWORDS = {
    "postgres": "postgres_password",
    "opdb_owner": "opdb_owner_password",
    "opdb_api": "opdb_api_password",
    "opdb_worker": "opdb_worker_password",
}
"""Each role's secret file (docker/compose.yaml's secrets), made for the stack."""


def wait_for(predicate: Any, limit_s: float, what: str, every_s: float = 0.5) -> Any:
    """Call ``predicate`` until it returns something true; return that (fail after ``limit_s``)."""
    end = time.monotonic() + limit_s
    while True:
        try:
            found = predicate()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            found = None
        if found:
            return found
        if time.monotonic() > end:
            pytest.fail(f"{what}: not within {limit_s:.0f} s")
        time.sleep(every_s)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The stack up, as a lab's `docker compose up -d` brings it (torn down afterwards)."""
    folder = tmp_path_factory.mktemp("stack")
    secret_dir = folder / "secrets"
    subprocess.run(
        ["bash", str(ROOT / "deploy" / "make-tls.sh"), "db.lab.example", str(secret_dir)],
        check=True,
        capture_output=True,
    )
    for name in ("opdb_api_token", *PASSWORDS.values()):
        (secret_dir / name).write_text(secrets.token_hex(16) + "\n", encoding="utf-8")
        (secret_dir / name).chmod(0o644)  # the containers' users (10001, postgres) read them
    variables = {"WORKER_HOST": "smoke"}
    variables["IMAGE_TAG"] = IMAGES["tag"]
    built = Stack(ENGINE, f"opdb-smoke-{os.getpid()}", variables, secret_dir)
    overrides(built.services, IMAGES["tag"], IMAGES["postgres"])
    start = time.monotonic()
    try:
        built.up()
        api = f"http://127.0.0.1:{published(built.services['api'])}"
        wait_for(lambda: http("GET", f"{api}/health")[0] == 200, 180, "the API's /health")
        REPORT["up_to_first_answer_s"] = round(time.monotonic() - start, 1)
        yield built
    finally:
        for service in ("roles", "migrate", "api", "worker", "postgres"):
            if service in built.services:
                print(f"--- {service}\n{built.logs(service)}")
        built.down()
        if IMAGES["report"]:
            Path(IMAGES["report"]).write_text(json.dumps(REPORT, indent=2) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def api(stack: Stack) -> str:
    return f"http://127.0.0.1:{published(stack.services['api'])}"


@pytest.fixture(scope="module")
def token(stack: Stack) -> dict[str, str]:
    value = (stack.secrets_dir / "opdb_api_token").read_text(encoding="utf-8").strip()
    return {"Authorization": f"Bearer {value}"}


def ingest(api: str, token: dict[str, str], spec: str, name: str | None = None) -> str:
    """POST a spec from measurement_specs/ (under another model name if given); its model."""
    body = (ROOT / "measurement_specs" / spec).read_text(encoding="utf-8")
    if name is not None:
        body = body.replace(f"name: {spec.removesuffix('.yaml')}\n", f"name: {name}\n", 1)
    code, _, answer = http(
        "POST",
        f"{api}/specs?name={spec}",
        body.encode(),
        {**token, "Content-Type": "application/yaml"},
    )
    assert code == 201, answer
    return str(json.loads(answer)["model"])


def enqueue(api: str, token: dict[str, str], model: str) -> list[int]:
    """Queue the model on the fake kind; return its jobs' ids."""
    body = json.dumps({"device_kind": KIND, "coverage": 1.0}).encode()
    code, _, answer = http(
        "POST", f"{api}/models/{model}/jobs", body, {**token, "Content-Type": "application/json"}
    )
    assert code == 201, answer
    return [int(j["id"]) for j in jobs_of(api, model)]


def jobs_of(api: str, model: str) -> list[dict[str, Any]]:
    """Every job of ``model``."""
    code, _, answer = http("GET", f"{api}/jobs?model={model}&limit=200")
    assert code == 200, answer
    items: list[dict[str, Any]] = json.loads(answer)["items"]
    return items


def job(api: str, job_id: int) -> dict[str, Any]:
    code, _, answer = http("GET", f"{api}/jobs/{job_id}")
    assert code == 200, answer
    found: dict[str, Any] = json.loads(answer)
    return found


def all_done(api: str, model: str) -> bool:
    """Every job of ``model`` has ended (done, or failed/cancelled: the assertions look)."""
    items = jobs_of(api, model)
    return bool(items) and all(j["status"] in ("done", "failed", "cancelled") for j in items)


def test_the_compose_file_validates() -> None:
    """`docker compose config` (or podman-compose's) takes the file the lab uses, with no
    variable set: the passwords are secret files."""
    env = {k: v for k, v in os.environ.items() if "PASSWORD" not in k}
    if ENGINE == "docker":
        command = ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"]
    else:
        command = [COMPOSE_TOOL, "-f", str(COMPOSE), "config"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr


def test_a_spec_ingested_over_rest_is_measured_and_estimated(
    stack: Stack, api: str, token: dict[str, str]
) -> None:
    model = ingest(api, token, "mlp-small-b8.yaml")
    jobs = enqueue(api, token, model)
    assert jobs
    start = time.monotonic()
    wait_for(lambda: all_done(api, model), 300, f"the worker measuring {model}")
    REPORT["first_model_measured_s"] = round(time.monotonic() - start, 1)
    assert all(job(api, j)["status"] == "done" for j in jobs), [job(api, j) for j in jobs]
    code, _, answer = http("GET", f"{api}/models/{model}/estimate?device_kind={KIND}")
    assert code == 200, answer
    estimate = json.loads(answer)
    assert estimate["total_time_s"] and estimate["total_time_s"] > 0, estimate
    code, headers, page = http("GET", f"{api}/ui/")
    assert code == 200
    assert headers["content-type"].startswith("text/html")
    assert b"operator-db" in page


def test_a_worker_killed_mid_job_finishes_it_once_after_a_restart(
    stack: Stack, api: str, token: dict[str, str]
) -> None:
    model = ingest(api, token, "mlp-deep-b8.yaml")
    jobs = enqueue(api, token, model)

    def running() -> dict[str, Any] | None:
        return next((j for j in jobs_of(api, model) if j["status"] == "running"), None)

    victim = wait_for(running, 120, "a job running")
    stack.run("kill", "--signal", "KILL", stack.container("worker"))
    killed = time.monotonic()
    stack.run("start", stack.container("worker"))
    wait_for(lambda: all_done(api, model), 300, f"{model}'s jobs after the kill")
    REPORT["killed_job_done_after_s"] = round(time.monotonic() - killed, 1)
    after = job(api, victim["id"])
    assert after["status"] == "done", after
    assert after["attempts"] == victim["attempts"] + 1, (victim, after)
    assert all(job(api, j)["status"] == "done" for j in jobs)
    # Finished once: one result of the job in the database, counted as the owner over TLS.
    rows = sql_as(
        stack,
        f"SELECT count(*) FROM measurements WHERE job_id = {int(victim['id'])}"
        f" UNION ALL SELECT count(*) FROM full_model_runs WHERE job_id = {int(victim['id'])}",
    )
    assert sum(int(r) for r in rows) == 1, rows
    REPORT["killed_job"] = {"attempts": after["attempts"], "results": sum(int(r) for r in rows)}


def test_a_postgres_restart_is_503_problems_then_recovers_by_itself(
    stack: Stack, api: str, token: dict[str, str]
) -> None:
    answers: dict[str, int] = {}
    problems = 0
    stack.run("stop", "-t", "10", stack.container("postgres"))
    down_at = time.monotonic()
    for _ in range(10):
        for path in ("/health", "/models", f"/models/mlp-small-b8/estimate?device_kind={KIND}"):
            code, headers, _ = http("GET", f"{api}{path}")  # a dropped connection raises
            answers[str(code)] = answers.get(str(code), 0) + 1
            if code == 503:
                assert headers.get("content-type", "").startswith("application/problem+json")
                problems += 1
        time.sleep(0.2)
    assert problems > 0 and set(answers) == {"503"}, answers
    stack.run("start", stack.container("postgres"))
    wait_for(lambda: http("GET", f"{api}/health")[0] == 200, 120, "/health after the restart")
    REPORT["postgres_restart"] = {
        "answers_while_down": answers,
        "recovered_after_s": round(time.monotonic() - down_at, 1),
    }
    # The worker rode through: it takes a new job without being started again.
    before = stack.run("inspect", "--format", "{{.RestartCount}}", stack.container("worker"))
    model = ingest(api, token, "mlp-small-b8.yaml", name="mlp-small-b8-after-restart")
    assert enqueue(api, token, model)
    wait_for(lambda: all_done(api, model), 300, "a job after the restart")
    after = stack.run("inspect", "--format", "{{.RestartCount}}", stack.container("worker"))
    REPORT["worker_restarts_during_postgres_restart"] = int(after) - int(before)
    assert after == before, "the worker exited while PostgreSQL restarted"


def connect(stack: Stack, role: str, **tls: str) -> Any:
    """A psycopg connection as ``role`` from the host, through PostgreSQL's published port."""
    return psycopg.connect(
        host="localhost",
        port=published(stack.services["postgres"]),
        dbname="opdb",
        user=role,
        password=(stack.secrets_dir / PASSWORDS[role]).read_text(encoding="utf-8").strip(),
        connect_timeout=10,
        **tls,
    )


def sql_as(stack: Stack, sql: str, role: str = "opdb_owner") -> list[str]:
    """Run ``sql`` as ``role`` over TLS, the server's certificate checked; its rows' first cells."""
    ca = str(stack.secrets_dir / "postgres_ca.crt")
    with connect(stack, role, sslmode="verify-full", sslrootcert=ca) as connection:
        return [str(row[0]) for row in connection.execute(sql).fetchall()]


@pytest.mark.parametrize("role", ["opdb_api", "opdb_worker"])
def test_the_services_roles_cannot_change_the_schema(stack: Stack, role: str) -> None:
    assert sql_as(stack, "SELECT current_user", role) == [role]
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        sql_as(stack, "CREATE TABLE intruder (x int)", role)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        sql_as(stack, "COPY (SELECT 1) TO PROGRAM 'true'", role)


def test_postgres_refuses_a_connection_without_tls(stack: Stack) -> None:
    with pytest.raises(psycopg.OperationalError, match="no encryption|reject"):
        connect(stack, "opdb_worker", sslmode="disable")
    # And a certificate the lab's CA did not sign is not trusted (a man in the middle).
    not_a_ca = str(ROOT / "tests" / "deploy" / "stack.py")
    with pytest.raises(psycopg.OperationalError, match="certificate"):
        connect(stack, "opdb_worker", sslmode="verify-full", sslrootcert=not_a_ca)
