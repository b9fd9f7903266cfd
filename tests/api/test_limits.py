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
from api.limits import InFlight, RateLimiter
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
