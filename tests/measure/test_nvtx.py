"""OPDB_MEASURE__NVTX: one call of each configuration in an NVTX range named after its key."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from sqlalchemy import select

from operator_db.config import get_settings
from operator_db.db import queue
from operator_db.db.models import OperatorConfig
from operator_db.db.store import Store
from operator_db.devices.fake import FakeDevice
from operator_db.measure import nvtx
from operator_db.measure.engine import Target, measure, measure_interleaved
from operator_db.measure.settings import fast_settings
from operator_db.specs.keys import key_of_nvtx_range, nvtx_range_name
from operator_db.worker.daemon import Worker, WorkerOptions
from tests.worker.test_interleaved import ingest_mlp

KEY = "0123456789abcdef" * 4


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """torch.cuda.nvtx mocked: every push and pop is recorded, in order; nothing said yet."""
    seen: list[Any] = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: seen.append(("push", name)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: seen.append("pop"))
    monkeypatch.setattr(nvtx, "_said", set())
    return seen


@pytest.fixture
def cuda_like(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake device passes for a CUDA one where NVTX is concerned (there is no GPU here)."""
    monkeypatch.setattr(nvtx, "nvtx_unavailable", lambda device: None)


def test_the_range_name_holds_the_whole_key_and_is_read_back() -> None:
    assert nvtx_range_name(KEY) == "opdb:" + KEY
    assert key_of_nvtx_range(nvtx_range_name(KEY)) == KEY
    other = "f" * 64
    assert key_of_nvtx_range(f"<default domain>/opdb:{other}/opdb:{KEY}") == KEY  # innermost
    assert key_of_nvtx_range("opdb:" + KEY[:63]) is None  # a prefix names nothing
    assert key_of_nvtx_range("opdb:" + KEY + "0") is None  # nor does a longer hex string
    assert key_of_nvtx_range("ampere_sgemm_128x64_nn") is None


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert get_settings().measure.nvtx is False
    monkeypatch.setenv("OPDB_MEASURE__NVTX", "1")
    get_settings.cache_clear()
    assert get_settings().measure.nvtx is True


def test_one_call_after_the_warm_up_runs_inside_the_range(
    events: list[Any], cuda_like: None
) -> None:
    def run() -> None:
        events.append("call")

    measure(run, FakeDevice(), fast_settings(nvtx=True, energy=False), nvtx_range="opdb:" + KEY)
    push = events.index(("push", "opdb:" + KEY))
    assert events[push : push + 3] == [("push", "opdb:" + KEY), "call", "pop"]
    assert events.count("pop") == 1 and sum(isinstance(e, tuple) for e in events) == 1
    assert "call" in events[:push]  # warmed up first
    assert events[push + 3 :].count("call") > 1  # then the timed blocks, outside the range


def test_nothing_is_pushed_with_the_setting_off_or_without_a_name(
    events: list[Any], cuda_like: None
) -> None:
    device = FakeDevice()
    measure(lambda: None, device, fast_settings(energy=False), nvtx_range="opdb:" + KEY)
    measure(lambda: None, device, fast_settings(nvtx=True, energy=False))
    assert events == []


def test_never_on_a_cpu_and_said_once(events: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    device = FakeDevice()  # runs on the CPU
    settings = fast_settings(nvtx=True, energy=False)
    with caplog.at_level(logging.WARNING, logger="operator_db.measure.nvtx"):
        measure(lambda: None, device, settings, nvtx_range="opdb:" + KEY)
        measure(lambda: None, device, settings, nvtx_range="opdb:" + "f" * 64)
    assert events == []
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "OPDB_MEASURE__NVTX is on but does nothing: NVTX ranges are for CUDA devices; "
        "this one runs on cpu"
    ]


def test_a_torch_without_nvtx_is_said_once_and_runs_nothing(
    monkeypatch: pytest.MonkeyPatch, cuda_like: None, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(nvtx, "_said", set())

    def stub(name: str) -> None:
        raise RuntimeError("NVTX functions not installed. Are you sure you have a CUDA build?")

    monkeypatch.setattr(torch.cuda.nvtx, "range_push", stub)
    calls: list[int] = []
    with caplog.at_level(logging.WARNING, logger="operator_db.measure.nvtx"):
        assert not nvtx.nvtx_probe(lambda: calls.append(1), "opdb:" + KEY, FakeDevice())
        assert not nvtx.nvtx_probe(lambda: calls.append(1), "opdb:" + KEY, FakeDevice())
    assert calls == [] and len(caplog.records) == 1
    assert "NVTX functions not installed" in caplog.records[0].getMessage()


def test_the_range_is_popped_when_the_call_fails(events: list[Any], cuda_like: None) -> None:
    def fails() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        nvtx.nvtx_probe(fails, "opdb:" + KEY, FakeDevice())
    assert events == [("push", "opdb:" + KEY), "pop"]


def test_interleaved_targets_with_a_range_get_one_call_each(
    events: list[Any], cuda_like: None
) -> None:
    targets = [
        Target("a", lambda: events.append("a"), nvtx_range="opdb:a"),
        Target("model", lambda: events.append("model")),
    ]
    measure_interleaved(targets, FakeDevice(), fast_settings(nvtx=True, energy=False))
    push = events.index(("push", "opdb:a"))
    assert events[push : push + 3] == [("push", "opdb:a"), "a", "pop"]
    assert [e for e in events if isinstance(e, tuple)] == [("push", "opdb:a")]


@pytest.mark.parametrize("interleaved", [False, True])
def test_the_worker_names_each_configuration_once(
    store: Store, events: list[Any], cuda_like: None, interleaved: bool
) -> None:
    ingest_mlp(store)
    device = FakeDevice(update_period_s=0.001)
    with store.transaction() as session:
        queue.enqueue_model(session, "tiny", device.identity().name, interleaved=interleaved)
        keys = sorted(session.scalars(select(OperatorConfig.key)))
    settings = fast_settings(nvtx=True, model_min_time_s=0.01)
    stats = Worker(store, device, settings, WorkerOptions(until_idle=True, poll_s=0.01)).run()
    assert stats.failed == 0
    pushed = [name for e in events if isinstance(e, tuple) for name in e[1:]]
    assert sorted(pushed) == [nvtx_range_name(k) for k in keys]  # the model and hollow run: none
    assert events.count("pop") == len(keys)
