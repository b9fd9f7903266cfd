"""``/llms``: the stored LLMs and their generation composed, as ``opdb llm estimate`` gives it."""

from __future__ import annotations

import json

import pytest

from tests.api.common import api_client
from tests.helpers import run_cli
from tests.llm.common import measured_tiny


def test_llms_and_their_generation(
    capsys: pytest.CaptureFixture[str], db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured_tiny(capsys, db_url, monkeypatch)
    shown = run_cli(capsys, "llm", "estimate", "tiny", "--json", "--db", db_url)
    with api_client(db_url) as client:
        listed = client.get("/llms").json()
        assert listed["total"] == 1 and listed["items"][0]["name"] == "tiny"
        llm = client.get("/llms/tiny").json()
        assert llm["kv_bytes_per_token"] == 512 and llm["shape"]["kv_heads"] == 2
        assert llm["plans"] == [{"batch": 2, "prompt": 8, "new_tokens": 4}]
        assert "tiny-b2-decode-c8" in llm["steps"]
        (row,) = client.get("/llms/tiny/generation").json()
        (cli,) = json.loads(shown.out)
        for figure in ("ttft_s", "tpot_s", "total_s"):
            assert row[figure]["value"] == pytest.approx(cli[figure]["value"])
        assert row["measured"]["runs"] == cli["measured"]["runs"]
        assert row["errors"]["total"]["verdict"] in ("within noise", "beyond noise")
        other = client.get(
            "/llms/tiny/generation", params={"batch": 2, "prompt": 8, "new_tokens": 6}
        )
        assert other.status_code == 200, other.text
        (point,) = other.json()
        assert point["measured"] is None and len(point["tpot_by_context"]) == 5
        assert any("extrapolated" in note for note in point["notes"])
        partial = client.get("/llms/tiny/generation", params={"new_tokens": 6})
        assert partial.status_code == 200  # batch 2 and prompt 8: the harvested point's
        assert partial.json()[0]["ttft_s"] == point["ttft_s"]
        too_long = client.get(
            "/llms/tiny/generation", params={"batch": 2, "prompt": 60, "new_tokens": 10}
        )
        assert too_long.status_code == 422 and "longer than" in too_long.json()["detail"]
        listing = client.get("/ui/llms")
        assert listing.status_code == 200 and 'data-llm="tiny"' in listing.text
        page = client.get("/ui/llms/tiny")
        assert page.status_code == 200, page.text
        assert 'data-batch="2" data-prompt="8" data-new="4"' in page.text
        ttft_ms = f"{row['ttft_s']['value'] * 1e3:.3g}"
        assert f'data-field="ttft_s" data-sort="{row["ttft_s"]["value"]!r}"' in page.text
        assert ttft_ms[:3] in page.text
        assert "TPOT against the context" in page.text  # the chart's label
        assert 'data-kind="fake:FakeGPU" data-how="measured"' in page.text
        assert client.get("/ui/llms/nothing").status_code == 404
        missing = client.get("/llms/nothing")
        assert missing.status_code == 404 and "no LLM named 'nothing'" in missing.json()["detail"]
        assert (
            client.get("/llms/tiny/generation", params={"device_kind": "none"}).status_code == 404
        )
