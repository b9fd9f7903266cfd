"""What the API tests share: the write token and a client of an app on the test's database."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.app import create_app
from operator_db.config import Settings
from tests.helpers import EXAMPLE_SPECS

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@contextmanager
def api_client(db_url: str, specs: Sequence[str] = ()) -> Iterator[TestClient]:
    """Yield a client of the app on ``db_url`` (write token ``TOKEN``), its lifespan running.

    ``specs`` names example specs (``measurement_specs/NAME.yaml``) uploaded first.
    """
    with TestClient(create_app(Settings(database_url=db_url, api_token=SecretStr(TOKEN)))) as c:
        for name in specs:
            text = (EXAMPLE_SPECS / f"{name}.yaml").read_text()
            assert c.post("/specs", params={"name": name}, content=text, headers=AUTH).is_success
        yield c
