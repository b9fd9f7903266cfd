"""``opdb llm``: harvest, list, measure and estimate a small LLM end to end (fake device)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from operator_db.config import FAST_FAKE_MEASURE
from operator_db.db.store import Store
from tests.helpers import run_cli
from tests.llm.common import LLAMA, LLAMA_OVERRIDES


def test_harvest_measure_estimate(
    capsys: pytest.CaptureFixture[str],
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    for name, value in FAST_FAKE_MEASURE.items():
        monkeypatch.setenv(name, value)
    harvest = ["llm", "harvest", LLAMA, *LLAMA_OVERRIDES, "-b", "1,2", "-p", "8", "-n", "4"]
    result = run_cli(capsys, *harvest, "--name", "tiny", "--db", db_url)
    assert result.code == 0, result.err
    assert "tiny: 6 step models" in result.out and "KV cache 512 B/token" in result.out
    assert "tiny-b2-decode-c10: " in result.out
    again = run_cli(capsys, *harvest, "--name", "tiny", "--db", db_url)
    assert again.code == 0 and "0 new configurations" in again.out  # stored once
    listing = run_cli(capsys, "llm", "list", "--db", db_url)
    assert "tiny" in listing.out and LLAMA in listing.out
    measured = run_cli(
        capsys, "llm", "measure", "tiny", "-b", "2", "--budget", "0", "--tight-budget", "0",
        "--db", db_url,
    )  # fmt: skip
    assert measured.code == 0, measured.err
    runs = re.search(r"generate\(\) at batch 2, prompt 8, 4 tokens: (\d+) runs", measured.out)
    assert runs is not None and int(runs.group(1)) >= 5  # no budget: each job's fewest
    shown = run_cli(capsys, "llm", "estimate", "tiny", "--json", "--db", db_url)
    assert shown.code == 0, shown.err
    (row,) = json.loads(shown.out)
    assert (row["batch"], row["prompt"], row["new_tokens"]) == (2, 8, 4)
    assert row["device_kind"] == "fake:FakeGPU"
    for figure in ("ttft_s", "tpot_s", "total_s"):
        assert row[figure]["low"] <= row[figure]["value"] <= row[figure]["high"]
        assert row["measured"][figure]["value"] > 0
        assert row["errors"][figure.removesuffix("_s")]["verdict"] in (
            "within noise",
            "beyond noise",
        )
    assert row["joules_per_token"]["value"] > 0  # the fake device reads energy
    # ... around each generate() run too: the energy is compared, idle power added between forwards
    assert row["measured"]["joules_per_token"] > 0
    assert row["errors"]["energy"]["verdict"] in ("within noise", "beyond noise")
    assert row["energy_between_j"]["value"] > 0
    assert [p["how"] for p in row["tpot_by_context"]] == ["measured", "interpolated", "measured"]
    table = run_cli(capsys, "llm", "estimate", "tiny", "--db", db_url)
    assert (
        "tiny on fake:FakeGPU" in table.out
        and "decode contexts: 2 measured, 1 interpolated" in table.out
    )
    other = run_cli(
        capsys, "llm", "estimate", "tiny", "-b", "2", "-p", "16", "-n", "8", "--db", db_url
    )
    assert other.code == 0, other.err
    assert "the prefill of 16 tokens is flat from measured prompts" in other.out
    assert "7 extrapolated" in other.out
    report = run_cli(capsys, "report", "-o", str(tmp_path / "report"), "--db", db_url)
    assert report.code == 0, report.err
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## LLMs: time per token against generate()" in text
    assert "| tiny | fake:FakeGPU | 2 | 8 | 4 |" in text
    with Store.open(db_url) as store, store.transaction(read_only=True) as session:
        from operator_db.db import queries

        llm = queries.get_llm(session, "tiny")
        assert llm.info["plans"] == [
            {"batch": 1, "prompt": 8, "new_tokens": 4},
            {"batch": 2, "prompt": 8, "new_tokens": 4},
        ]


def test_bad_requests_are_one_line(capsys: pytest.CaptureFixture[str], db_url: str) -> None:
    missing = run_cli(capsys, "llm", "estimate", "nothing", "--db", db_url)
    assert missing.code == 1
    assert missing.err.strip() == "error: no LLM named 'nothing'; none is stored (opdb llm harvest)"
    long = run_cli(
        capsys, "llm", "harvest", LLAMA, *LLAMA_OVERRIDES, "-p", "60", "-n", "10", "--db", db_url
    )
    assert long.code == 1
    assert long.err.count("\n") == 1 and "a context of 70 tokens is longer than" in long.err
    bad = run_cli(capsys, "llm", "harvest", LLAMA, "-b", "0", "--db", db_url)
    assert bad.code == 1 and "bad batch sizes '0'" in bad.err
    with Store.open(db_url) as store, store.transaction(read_only=True) as session:
        from operator_db.db import queries

        assert queries.list_llms(session) == [] and queries.list_models(session) == []


def test_half_precision(
    capsys: pytest.CaptureFixture[str], db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in FAST_FAKE_MEASURE.items():
        monkeypatch.setenv(name, value)
    harvest = ["llm", "harvest", LLAMA, *LLAMA_OVERRIDES, "-b", "1", "-p", "8", "-n", "3"]
    done = run_cli(capsys, *harvest, "--dtype", "bfloat16", "--name", "half", "--db", db_url)
    assert done.code == 0, done.err
    assert "bfloat16, KV cache 256 B/token" in done.out  # half of float32's 512
    with Store.open(db_url) as store, store.transaction(read_only=True) as session:
        from operator_db.db import queries

        step = queries.get_model(session, "half-b1-decode-c8")
        assert step.dtype == "bfloat16"
        linear = {
            c.config.dtype
            for c in queries.model_configs(session, step.id)
            if c.config.op == "torch.nn.Linear"
        }
        assert linear == {"bfloat16"}, linear  # RMSNorm's own float32 upcast stays float32
    measured = run_cli(
        capsys, "llm", "measure", "half", "--budget", "0", "--tight-budget", "0", "--db", db_url
    )
    assert measured.code == 0, measured.err
    (row,) = json.loads(run_cli(capsys, "llm", "estimate", "half", "--json", "--db", db_url).out)
    assert row["tpot_s"]["value"] > 0 and row["measured"]["tpot_s"]["value"] > 0
