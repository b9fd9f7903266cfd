"""What keeps a browser safe: the security headers on every answer, redirects that never name the
``Host`` header's host, pages without inline script or style, and /docs without a CDN."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.security import CSP
from operator_db.config import Settings
from tests.ui.seed import MODEL, Seeded, seed

HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
}


@pytest.fixture
def seeded(db_url: str) -> Seeded:
    return seed(db_url)


@pytest.fixture
def client(db_url: str, seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url))) as c:
        yield c


def _pages(client: TestClient) -> list[str]:
    key = client.get("/configurations").json()["items"][0]["key"]
    job = client.get("/jobs").json()["items"][0]["id"]
    return [
        "/ui/",
        "/ui/models",
        f"/ui/models/{MODEL}",
        f"/ui/models/{MODEL}/compare",
        "/ui/jobs",
        f"/ui/jobs/{job}",
        f"/ui/configurations/{key}",
        "/ui/login",
        "/ui/models/no-such-model",
        "/docs",
    ]


def test_every_answer_carries_the_security_headers(client: TestClient) -> None:
    for path in [*_pages(client), "/health", "/models", "/nowhere", "/ui/static/ui.js"]:
        response = client.get(path)
        for name, value in HEADERS.items():
            assert response.headers.get(name) == value, (path, name)
    assert "script-src 'self';" in CSP and "frame-ancestors 'none'" in CSP
    assert "unsafe-inline" not in CSP


def test_pages_hold_no_inline_script_or_style(client: TestClient) -> None:
    """What the CSP would block: an inline script, an event handler attribute, a style."""
    for path in _pages(client):
        html = client.get(path).text
        scripts = re.findall(r"<script\b[^>]*>", html)
        assert scripts == ['<script src="/ui/static/ui.js" defer>'], (path, scripts)
        assert not re.search(r"<style\b|\sstyle=|\son[a-z]+=", html), path


def test_docs_is_served_from_the_app_without_a_cdn(client: TestClient) -> None:
    response = client.get("/docs")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    html = response.text
    assert not re.findall(r"""(?:src|href)=["']?(?:https?:)?//""", html)  # nothing loaded from afar
    assert "cdn" not in html.lower() and "swagger-ui" not in html.lower()
    document = client.get("/openapi.json").json()
    for path, item in document["paths"].items():
        for method in item:
            assert f"<code>{method.upper()} {path}</code>" in html, (method, path)
    assert 'id="schema-EnqueueIn"' in html and 'href="/openapi.json"' in html
    assert client.get("/redoc", follow_redirects=False).headers["location"] == "/docs"


@pytest.mark.parametrize(
    ("origin", "expected"),
    [(None, "/ui/models"), ("https://opdb.example.org", "https://opdb.example.org/ui/models")],
)
def test_redirects_never_name_the_host_header(
    db_url: str, seeded: Seeded, origin: str | None, expected: str
) -> None:
    settings = Settings(database_url=db_url, api_public_origin=origin)
    with TestClient(create_app(settings)) as c:
        evil = {"Host": "evil.example"}
        slash = c.get("/ui/models/", headers=evil, follow_redirects=False)
        assert slash.status_code in (307, 308)
        assert slash.headers["location"] == expected
        root = c.get("/ui", headers=evil, follow_redirects=False)
        assert root.headers["location"] == expected.replace("/ui/models", "/ui/")
        assert "evil.example" not in root.headers["location"] + slash.headers["location"]


def test_dns_rebinding_is_refused_by_the_allowed_hosts(db_url: str) -> None:
    """There was no allowed-host list: DNS rebinding reached an open-read API on 127.0.0.1."""
    settings = Settings(database_url=db_url, api_allowed_hosts=["localhost", "*.lab.example"])
    with TestClient(create_app(settings), base_url="http://localhost:8000") as c:
        assert c.get("/health").status_code == 200
        assert c.get("/health", headers={"Host": "opdb.lab.example:8000"}).status_code == 200
        rebound = c.get("/models", headers={"Host": "evil.example"})
        assert rebound.status_code == 400 and rebound.json()["error"] == "HostNotAllowed"
        assert rebound.headers["content-security-policy"]


def test_an_invalid_host_gets_a_400_never_a_redirect(db_url: str) -> None:
    """An invalid Host got an absolute redirect naming the bind address."""
    with TestClient(create_app(Settings(database_url=db_url))) as c:
        for bad in ("a b", "x/y", "@evil", "[::1"):
            answer = c.get("/ui", headers={"Host": bad}, follow_redirects=False)
            assert answer.status_code == 400, bad
            assert "location" not in answer.headers


def test_serve_on_loopback_answers_to_the_loopback_names_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json

    from operator_db.cli.serve import LOOPBACK_NAMES, loopback_only
    from operator_db.config import get_settings

    monkeypatch.setenv(
        "OPDB_API_ALLOWED_HOSTS", "[]"
    )  # recorded: what loopback_only sets is undone
    monkeypatch.delenv("OPDB_API_ALLOWED_HOSTS")
    get_settings.cache_clear()
    loopback_only("0.0.0.0")  # every address: hosts as configured
    assert get_settings().api_allowed_hosts == ["*"]
    loopback_only("127.0.0.1")
    assert get_settings().api_allowed_hosts == LOOPBACK_NAMES
    monkeypatch.setenv("OPDB_API_ALLOWED_HOSTS", json.dumps(["opdb.lab"]))
    get_settings.cache_clear()
    loopback_only("::1")  # configured: kept
    assert get_settings().api_allowed_hosts == ["opdb.lab"]
    get_settings.cache_clear()
