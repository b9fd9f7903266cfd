"""The pages' sign-in: forms only from this origin, a random cookie kept server-side (never the
token), Secure over TLS, sign-out that ends it, and a sign-in page that says what it takes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.app import create_app
from api.ui.session import COOKIE, SESSION_S, session_right
from operator_db.config import Settings
from operator_db.db.store import Store

READ = "reader-token-0123456789"
WRITE = "writer-token-0123456789"
SIGN_IN = {"token": READ, "next": "/ui/jobs"}


def _settings(db_url: str, **more: object) -> Settings:
    return Settings(
        database_url=db_url,
        api_token=SecretStr(WRITE),
        api_read_tokens=[SecretStr(READ)],
        api_protect_reads=True,
        **more,  # type: ignore[arg-type]
    )


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(_settings(db_url))) as c:
        yield c


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Referer": "https://evil.example/page"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": "http://testserver.evil.example"},
    ],
)
def test_a_form_from_another_site_is_refused(client: TestClient, headers: dict[str, str]) -> None:
    response = client.post("/ui/login", data=SIGN_IN, headers=headers, follow_redirects=False)
    assert response.status_code == 403, response.text
    # a browser sent it: an error page, not a problem document's raw JSON
    assert response.headers["content-type"].startswith("text/html")
    assert "is refused" in response.text and "content-security-policy" in response.headers
    assert COOKIE not in response.cookies
    logout = client.post("/ui/logout", headers=headers, follow_redirects=False)
    assert logout.status_code == 403


def test_a_form_from_this_origin_signs_in(client: TestClient) -> None:
    for headers in ({"Origin": "http://testserver"}, {"Referer": "http://testserver/ui/login"}, {}):
        client.cookies.clear()
        response = client.post("/ui/login", data=SIGN_IN, headers=headers, follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"] == "/ui/jobs"
        assert client.get("/ui/jobs", follow_redirects=False).status_code == 200


def test_with_a_public_origin_forms_come_from_it_alone(db_url: str) -> None:
    settings = _settings(db_url, api_public_origin="https://opdb.example.org")
    with TestClient(create_app(settings)) as c:
        own = c.post(
            "/ui/login",
            data=SIGN_IN,
            headers={"Origin": "https://opdb.example.org"},
            follow_redirects=False,
        )
        assert own.status_code == 303
        assert own.headers["location"] == "https://opdb.example.org/ui/jobs"
        behind = c.post(
            "/ui/login",
            data=SIGN_IN,
            headers={"Origin": "http://testserver"},
            follow_redirects=False,
        )
        assert behind.status_code == 403
        assert "takes forms from https://opdb.example.org only" in behind.text  # its error page


def _right(settings: Settings, db_url: str, value: str, now_s: float) -> str | None:
    with Store.open(db_url) as store, store.transaction(read_only=True) as session:
        return session_right(settings, session, value, now_s)


def test_the_cookie_is_random_never_the_token(client: TestClient, db_url: str) -> None:
    """The cookie was an HMAC keyed with the token over a public message: an offline oracle."""
    response = client.post("/ui/login", data=SIGN_IN, follow_redirects=False)
    cookie = response.headers["set-cookie"]
    value = response.cookies[COOKIE]
    assert READ not in cookie and WRITE not in cookie and len(value) == 43
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    assert "path=/ui" in cookie.lower() and f"max-age={SESSION_S}" in cookie.lower()
    assert "secure" not in cookie.lower()  # plain http: a Secure cookie would never come back
    settings = _settings(db_url)
    now = time.time()
    assert _right(settings, db_url, value, now) == "read"
    again = client.post("/ui/login", data=SIGN_IN, follow_redirects=False).cookies[COOKIE]
    assert again != value  # nothing in it follows from the token
    for forged in (value[:-1] + ("A" if value[-1] != "A" else "B"), READ, "", "1.2.3"):
        assert _right(settings, db_url, forged, now) is None, forged
    # standing for a token the server no longer has: not signed in
    revoked = Settings(database_url=db_url, api_token=SecretStr(WRITE), api_protect_reads=True)
    assert _right(revoked, db_url, value, now) is None
    client.cookies.clear()
    client.cookies.set(COOKIE, value[:-1] + "x", path="/ui")
    assert client.get("/ui/", follow_redirects=False).status_code == 303  # to the sign-in


def test_the_server_enforces_the_expiry(client: TestClient, db_url: str) -> None:
    """An expiry of 999999999999 in the cookie was accepted: the server keeps it now."""
    value = client.post("/ui/login", data=SIGN_IN, follow_redirects=False).cookies[COOKIE]
    settings = _settings(db_url)
    assert _right(settings, db_url, value, time.time() + SESSION_S - 60) == "read"
    assert _right(settings, db_url, value, time.time() + SESSION_S + 1) is None


def test_a_copied_cookie_dies_with_sign_out(db_url: str) -> None:
    """A copied cookie outlived sign-out and restarts."""
    with TestClient(create_app(_settings(db_url))) as browser:
        value = browser.post("/ui/login", data=SIGN_IN, follow_redirects=False).cookies[COOKIE]
    with TestClient(create_app(_settings(db_url))) as thief:  # another process: a restart
        thief.cookies.set(COOKIE, value, path="/ui")
        assert thief.get("/ui/jobs", follow_redirects=False).status_code == 200
        browser_again = TestClient(create_app(_settings(db_url)))
        with browser_again:
            browser_again.cookies.set(COOKIE, value, path="/ui")
            assert browser_again.post("/ui/logout", follow_redirects=False).status_code == 303
        assert thief.get("/ui/jobs", follow_redirects=False).status_code == 303  # signed out


@pytest.mark.parametrize(
    ("base_url", "origin", "secure"),
    [
        ("http://testserver", None, False),
        ("https://testserver", None, True),  # uvicorn sets https behind a trusted proxy too
        ("http://testserver", "https://opdb.example.org", True),
        ("http://testserver", "http://opdb.example.org", False),
    ],
)
def test_the_cookie_is_secure_over_tls(
    db_url: str, base_url: str, origin: str | None, secure: bool
) -> None:
    settings = _settings(db_url, api_public_origin=origin)
    with TestClient(create_app(settings), base_url=base_url) as c:
        headers = {"Origin": origin} if origin else {}
        response = c.post("/ui/login", data=SIGN_IN, headers=headers, follow_redirects=False)
        assert response.status_code == 303, response.text
        assert ("; secure" in response.headers["set-cookie"].lower()) is secure


def test_sign_out_clears_the_cookie(client: TestClient) -> None:
    client.post("/ui/login", data=SIGN_IN)
    page = client.get("/ui/")
    assert page.status_code == 200 and 'action="/ui/logout"' in page.text
    response = client.post("/ui/logout", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/login?signed_out=true"
    assert f'{COOKIE}=""' in response.headers["set-cookie"]
    assert "max-age=0" in response.headers["set-cookie"].lower()
    assert COOKIE not in client.cookies
    assert client.get("/ui/", follow_redirects=False).status_code == 303
    assert "You are signed out." in client.get("/ui/login?signed_out=true").text


def test_the_sign_in_page_says_what_it_takes(db_url: str) -> None:
    with TestClient(create_app(_settings(db_url))) as c:
        page = c.get("/ui/login").text
        assert '<label for="token">Token</label>' in page and "Read token" not in page
        assert "a read token" in page and "or a write token" in page
        # A write token signs in too.
        c.post("/ui/login", data={"token": WRITE, "next": "/ui/"})
        assert c.get("/ui/", follow_redirects=False).status_code == 200
    with TestClient(create_app(Settings(database_url=db_url))) as c:  # reads open, no token
        page = c.get("/ui/login").text
        assert "no token is needed" in page and "<form" not in page.split("<main")[1]
    unarmed = Settings(database_url=db_url, api_protect_reads=True)
    with TestClient(create_app(unarmed)) as c:
        page = c.get("/ui/login").text
        assert "but it has none" in page and 'name="token"' not in page
