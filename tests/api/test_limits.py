"""What one client can cost the API: metrics labels, kept figures, rates, requests in flight."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi import Request, Response
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.app import create_app
from api.figures import FIGURES, FigureCache
from api.limits import LOGIN_BURST, InFlight, RateLimiter, TimeShare
from operator_db.config import Settings
from tests.api.common import AUTH, TOKEN, api_client
from tests.helpers import EXAMPLE_SPECS, measure_everything

H100 = "NVIDIA H100 80GB HBM3"
MODEL = "mlp-deep-b8"
ROOFLINE = f"/models/{MODEL}/roofline"


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with api_client(db_url, [MODEL]) as c:
        yield c


def test_invented_methods_do_not_grow_the_metrics(client: TestClient) -> None:
    """5,000 invented methods took /metrics from 44 KB to 8.7 MB: each was a new series."""
    client.request("BREW", "/health")
    client.request("BREW", "/no/such/path")
    client.get("/metrics")  # counted once answered: its own series, from the next scrape on
    before = client.get("/metrics").content
    for i in range(300):
        client.request(f"X{i}", "/health")
        client.request(f"Y{i}", f"/no/such/path/{i}")
    after = client.get("/metrics").content
    assert b'method="other",route="/health"' in after
    assert b'method="other",route="(unmatched)"' in after
    assert b"X17" not in after and b"BREW" not in after and b"/no/such" not in after
    assert len(after) - len(before) < 200  # larger counts only


def test_a_roofline_is_drawn_once_until_its_data_changes(client: TestClient, db_url: str) -> None:
    measure_everything(db_url, H100)
    params = {"device_kind": H100, "format": "svg"}
    drawn = FIGURES.drawn
    first = client.get(ROOFLINE, params=params)
    second = client.get(ROOFLINE, params=params)
    assert first.status_code == second.status_code == 200
    assert second.content == first.content and FIGURES.drawn == drawn + 1
    client.get(ROOFLINE, params={"device_kind": H100})  # PNG: another figure
    assert FIGURES.drawn == drawn + 2
    measure_everything(db_url, H100)  # new results: the figure may change
    assert client.get(ROOFLINE, params=params).status_code == 200
    assert FIGURES.drawn == drawn + 3


def test_concurrent_requests_for_a_roofline_draw_it_once(client: TestClient, db_url: str) -> None:
    measure_everything(db_url, H100)
    drawn = FIGURES.drawn
    with ThreadPoolExecutor(8) as pool:
        codes = list(
            pool.map(
                lambda _: client.get(ROOFLINE, params={"device_kind": H100}).status_code, range(8)
            )
        )
    assert codes == [200] * 8 and FIGURES.drawn == drawn + 1


def test_requests_waiting_for_a_figure_leave_session_slots_to_the_others(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests waiting for the one roofline being drawn held every session slot: a plain
    /models took 2.5-5.5 s. At most FIGURE_TURNS of them hold a slot now."""
    import api.routes.models as routes

    drawing, release = threading.Event(), threading.Event()

    class Slow:
        def render(self, fmt: str) -> bytes:
            drawing.set()
            assert release.wait(30)
            return b"<svg/>"

    monkeypatch.setattr(routes, "model_roofline", lambda *args: Slow())
    settings = Settings(database_url=db_url, api_token=SecretStr(TOKEN), api_concurrency=3)
    with TestClient(create_app(settings)) as c, ThreadPoolExecutor(9) as pool:
        spec = (EXAMPLE_SPECS / f"{MODEL}.yaml").read_text()
        assert c.post("/specs", params={"name": MODEL}, content=spec, headers=AUTH).is_success
        measure_everything(db_url, H100)
        figures = [
            pool.submit(c.get, ROOFLINE, params={"device_kind": H100, "format": fmt})
            for fmt in ("svg", "png") * 4
        ]
        assert drawing.wait(10)
        time.sleep(0.5)  # the other seven reach their waits
        start = time.monotonic()
        listed = pool.submit(c.get, "/models").result(timeout=10)
        waited = time.monotonic() - start
        release.set()
        codes = [f.result(timeout=30).status_code for f in figures]
    assert listed.status_code == 200 and waited < 5
    assert codes == [200] * 8


def test_the_figure_cache_draws_one_at_a_time_and_stays_bounded() -> None:
    cache = FigureCache(entries=3, max_bytes=10)
    busy = threading.Event()
    drawing = []

    def draw() -> bytes:
        assert not busy.is_set(), "two figures drawn at once"
        busy.set()
        drawing.append(1)
        time.sleep(0.05)
        busy.clear()
        return b"abc"

    with ThreadPoolExecutor(40) as pool:
        assert set(pool.map(lambda _: cache.get("k", draw), range(40))) == {b"abc"}
    assert cache.drawn == 1
    for key in ("a", "b", "c"):  # three more figures of 3 bytes: 9 kept, "k" dropped
        cache.get(key, lambda: b"xyz")
    assert cache.get("k", lambda: b"new") == b"new"  # over 3 entries and 10 bytes: drawn again
    assert cache.drawn == 5


def test_expensive_reads_beyond_the_rate_get_a_429(db_url: str) -> None:
    settings = Settings(
        database_url=db_url, api_token=SecretStr(TOKEN), api_rate_per_s=0.5, api_rate_burst=2
    )
    with TestClient(create_app(settings)) as c:
        spec = (EXAMPLE_SPECS / f"{MODEL}.yaml").read_text()
        assert c.post("/specs", params={"name": MODEL}, content=spec, headers=AUTH).is_success
        estimate = f"/models/{MODEL}/estimate"
        assert [c.get(estimate, params={"device_kind": H100}).status_code for _ in range(2)] == [
            404,
            404,
        ]  # nothing measured on the kind: answered, and counted
        refused = c.get(f"/models/{MODEL}/compare")
        assert refused.status_code == 429
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.headers["retry-after"] == "2"
        assert "too many expensive reads" in refused.json()["detail"]
        assert c.get("/models").status_code == 200  # cheap reads are not counted


def test_a_bucket_refills_at_the_rate() -> None:
    now = [0.0]
    limiter = RateLimiter(2.0, 3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == pytest.approx(0.5)
    assert limiter.take("b") == 0.0  # per client
    now[0] = 0.5
    assert limiter.take("a") == 0.0
    assert RateLimiter(0, 1).take("a") == 0.0  # 0: no limit


def test_requests_beyond_the_most_in_flight_get_a_503() -> None:
    async def scenario() -> list[int]:
        limit = InFlight(2)
        release = asyncio.Event()

        async def slow(_request: Request) -> Response:
            await release.wait()
            return Response(status_code=200)

        request = Request({"type": "http", "method": "GET", "path": "/x", "headers": []})
        held = [asyncio.create_task(limit.middleware(request, slow)) for _ in range(2)]
        await asyncio.sleep(0)
        refused = await limit.middleware(request, slow)
        release.set()
        return [refused.status_code, *[(await t).status_code for t in held], limit.now]

    assert asyncio.run(scenario()) == [503, 200, 200, 0]


def test_a_client_is_charged_the_server_time_it_takes() -> None:
    """/ui/configurations/{key} (42 ms), /configurations?limit=1000: costly and unlimited."""
    now = [0.0]
    share = TimeShare(1.0, 2.0, clock=lambda: now[0])
    assert share.admit("a") == 0.0
    share.charge("a", 3.0)  # 2 s kept, 3 s used: 1 s in debt
    assert share.admit("a") == pytest.approx(1.0)
    assert share.admit("b") == 0.0  # per client
    now[0] = 1.5
    assert share.admit("a") == 0.0
    assert TimeShare(0, 1).admit("a") == 0.0  # 0: no limit


def test_costly_reads_beyond_the_share_get_a_429_and_failures_cost_nothing(db_url: str) -> None:
    settings = Settings(database_url=db_url, api_client_share=0.001, api_client_burst_s=0.05)
    with TestClient(create_app(settings)) as c:
        codes = [c.get("/configurations", params={"limit": 1000}).status_code for _ in range(60)]
        assert codes[0] == 200 and codes[-1] == 429
        refused = c.get("/models")
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert "share of the server's time" in refused.json()["detail"]


def test_an_expensive_read_the_server_failed_gives_its_token_back() -> None:
    limiter = RateLimiter(0.001, 1)
    assert limiter.take("a") == 0.0 and limiter.take("a") > 0
    limiter.give_back("a")
    assert limiter.take("a") == 0.0


def test_clients_with_tokens_are_apart_behind_one_address(db_url: str) -> None:
    """Under compose every client came from the gateway's address and shared one bucket."""
    settings = Settings(
        database_url=db_url,
        api_read_tokens=[SecretStr("reader-one"), SecretStr("reader-two")],
        api_rate_per_s=0.001,
        api_rate_burst=1,
    )
    with TestClient(create_app(settings)) as c:
        estimate = f"/models/{MODEL}/compare"
        one, two = ({"Authorization": f"Bearer reader-{n}"} for n in ("one", "two"))
        assert c.get(estimate, headers=one).status_code == 404
        assert c.get(estimate, headers=one).status_code == 429
        assert c.get(estimate, headers=two).status_code == 404  # a bucket of its own
        assert c.get(estimate).status_code == 404  # the address's bucket
        bad = {"Authorization": "Bearer made-up"}  # an unknown token is its address
        assert c.get(estimate, headers=bad).status_code == 429


def test_sign_ins_are_throttled(db_url: str) -> None:
    settings = Settings(database_url=db_url, api_token=SecretStr(TOKEN))
    with TestClient(create_app(settings)) as c:
        codes = [
            c.post("/ui/login", data={"token": "guess"}, follow_redirects=False).status_code
            for _ in range(LOGIN_BURST + 1)
        ]
        throttled = c.post("/ui/login", data={"token": "guess"}, follow_redirects=False)
    assert codes[:LOGIN_BURST] != [429] * LOGIN_BURST and codes[-1] == 429
    # the sign-in form is a browser's: the refusal is a page that says when to try again
    assert throttled.status_code == 429 and int(throttled.headers["retry-after"]) >= 1
    assert throttled.headers["content-type"].startswith("text/html")
    assert "too many sign-ins" in throttled.text


def test_forwarded_headers_are_believed_from_configured_proxies_only() -> None:
    """A rotating X-Forwarded-For from 127.0.0.1 got 300 of 300 through: uvicorn trusted it."""
    from api.server import server_config

    plain = server_config("127.0.0.1", 8000, 1, settings=Settings())
    assert plain.proxy_headers is False
    behind = server_config(
        "127.0.0.1", 8000, 1, settings=Settings(api_forwarded_allow_ips=["10.0.0.7"])
    )
    assert behind.proxy_headers is True and behind.forwarded_allow_ips == ["10.0.0.7"]


def test_serve_takes_the_forwarded_allow_ips_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/api.md named a --forwarded-allow-ips that opdb serve did not have."""
    from typer.testing import CliRunner

    import api.server
    from operator_db.cli.main import app

    seen: list[object] = []
    monkeypatch.setattr(api.server, "run", lambda config: seen.append(config))
    result = CliRunner().invoke(app, ["serve", "--forwarded-allow-ips", "10.0.0.7, 10.1.0.0/16"])
    assert result.exit_code == 0, result.output
    [config] = seen
    assert config.proxy_headers is True  # type: ignore[attr-defined]
    assert config.forwarded_allow_ips == ["10.0.0.7", "10.1.0.0/16"]  # type: ignore[attr-defined]
