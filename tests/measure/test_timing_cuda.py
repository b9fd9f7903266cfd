"""GPU timing without a GPU: CUDA's stream, event and graph calls replaced by recording fakes.

Each fake advances a device clock (what CUDA events read) apart from the host clock (what the
host's loop takes), as an asynchronous launch does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from operator_db.devices.fake import FakeDevice
from operator_db.errors import DeviceContextLostError, MeasurementError
from operator_db.measure import engine, generator, timing
from operator_db.measure.cuda_errors import is_sticky_cuda_error
from operator_db.measure.engine import measure
from operator_db.measure.settings import fast_settings
from operator_db.measure.timing import BlockTimer, graph_timing_unavailable, time_cuda_graph


class FakeCuda:
    """Host clock (ns, the injected clock), device clock (s, what events read), and a log."""

    def __init__(self) -> None:
        self.host_ns = 0
        self.device_s = 0.0
        self.log: list[str] = []
        self.current = "main"

    def clock(self) -> int:
        return self.host_ns

    def call(self, host_s: float, device_s: float) -> None:
        self.host_ns += round(host_s * 1e9)
        self.device_s += device_s
        self.log.append(f"call@{self.current}")


class FakeEvent:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda
        self.at: float | None = None

    def record(self, stream: Any = None) -> None:
        self.cuda.log.append(f"record@{stream}")
        self.at = self.cuda.device_s

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.at is not None and end.at is not None
        return (end.at - self.at) * 1000  # ms, as CUDA events give it


class FakeGraph:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda
        self.calls = 0

    def replay(self) -> None:
        self.cuda.log.append("replay")
        self.cuda.device_s += self.calls * 5e-6  # the launch gaps are gone in a graph


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    fake = FakeCuda()
    graphs: list[FakeGraph] = []

    class Stream:
        def __init__(self, name: str = "side") -> None:
            self.name = name

        def wait_stream(self, other: Any) -> None:
            fake.log.append(f"wait {self}<-{other}")

        def __str__(self) -> str:
            return self.name

    main = Stream("main")

    @contextmanager
    def on_stream(stream: Stream) -> Iterator[None]:
        before, fake.current = fake.current, stream.name
        yield
        fake.current = before

    def new_graph() -> FakeGraph:
        graphs.append(FakeGraph(fake))
        return graphs[-1]

    @contextmanager
    def capture(graph: FakeGraph) -> Iterator[None]:
        fake.log.append("capture")
        before, fake.current = fake.current, "capture"
        calls_before = fake.log.count("call@capture")
        yield
        graph.calls = fake.log.count("call@capture") - calls_before
        fake.current = before

    monkeypatch.setattr(timing, "_cuda_event", lambda: FakeEvent(fake))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: main)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", on_stream)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", new_graph)
    monkeypatch.setattr(torch.cuda, "graph", capture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: fake.log.append("sync"))
    return fake


class CudaFake(FakeDevice):
    """The fake device, seen as ``cuda:0`` by the timer."""

    def torch_device(self) -> torch.device:
        return torch.device("cuda", 0)


def test_the_graph_is_replayed_once_untimed_then_timed_on_the_named_stream(
    cuda: FakeCuda,
) -> None:
    settings = fast_settings(graph_unroll=4, blocks=3, block_min_s=1e-4)
    result = time_cuda_graph(
        lambda: cuda.call(1e-6, 10e-6), settings, 10e-6, stream=torch.cuda.current_stream()
    )
    log = cuda.log
    first_timed = log.index("record@main")
    assert (
        log[:1] == ["wait side<-main"] and log.count("call@side") == 3
    )  # warm-up on a side stream
    assert log.count("call@capture") == 4
    assert log[first_timed - 2 : first_timed] == ["replay", "sync"]  # once, untimed, then synced
    assert result.method == "graph" and len(result.block_s) == 3
    assert all(entry != "record@None" for entry in log)


def test_graph_timing_needs_torch_2_4(cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing, "_graphs_off", None)
    assert graph_timing_unavailable("2.13.0+cu128") is None
    assert graph_timing_unavailable("2.11.0+cu130") is None  # what the GPU hosts have
    assert graph_timing_unavailable("2.4.0") is None
    old = graph_timing_unavailable("2.3.1+cu121")
    assert old is not None and "older than 2.4" in old
    monkeypatch.setattr(torch, "__version__", "2.3.1+cu121")
    with pytest.raises(MeasurementError, match="older than 2.4"):
        time_cuda_graph(lambda: None, fast_settings(), 1e-6)
    device = CudaFake(update_period_s=0.001)
    result = measure(
        lambda: cuda.call(1e-6, 10e-6),
        device,
        fast_settings(energy=False),
        clock=cuda.clock,
    )
    assert "graph_unavailable" in result.flags
    assert "older than 2.4" in result.provenance["graph_unavailable"]
    assert [t.method for t in result.timings] == ["eager"]


def _failing(cuda: FakeCuda) -> Any:
    def run() -> None:
        if cuda.current == "capture":
            raise RuntimeError("operation not permitted when stream is capturing")
        cuda.call(1e-6, 10e-6)

    return run


@pytest.mark.parametrize(
    ("version", "off_after"), [("2.11.0+cu130", True), ("2.13.0+cu130", False)]
)
def test_a_failed_capture_on_an_old_torch_turns_graphs_off_for_the_process(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch, version: str, off_after: bool
) -> None:
    """torch < 2.13 may keep a failed capture's state in its allocator: after the first failed
    capture, graph timing is off for the rest of the process (eager goes on); 2.13 is clean."""
    monkeypatch.setattr(timing, "_graphs_off", None)
    monkeypatch.setattr(torch, "__version__", version)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch, "empty", lambda *a, **k: _Probe())
    with pytest.raises(MeasurementError, match="CUDA graph capture failed: RuntimeError"):
        time_cuda_graph(_failing(cuda), fast_settings(), 10e-6)
    off = graph_timing_unavailable()
    assert (off is not None) == off_after
    if off_after:
        assert off is not None and "after a failed capture" in off and version in off
        with pytest.raises(MeasurementError, match="off for this process"):
            time_cuda_graph(lambda: cuda.call(1e-6, 10e-6), fast_settings(), 10e-6)
    else:  # the next op is captured as usual
        assert time_cuda_graph(lambda: cuda.call(1e-6, 10e-6), fast_settings(), 10e-6)


class _Probe:
    """A one-element CUDA tensor whose random fill fails while ``stuck`` (the generator's state
    left capturing by a failed capture)."""

    stuck = False

    def uniform_(self) -> None:
        if _Probe.stuck:
            raise RuntimeError("Offset increment outside graph capture encountered unexpectedly.")


@pytest.mark.parametrize("fresh_state_helps", [True, False])
def test_a_generator_left_capturing_gets_a_fresh_state(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch, fresh_state_helps: bool
) -> None:
    """On torch 2.11 (an H100) a failed capture left the CUDA generator capturing: every later
    random fill of the process failed, a model's weights too. The generator gets a fresh state;
    where that does not help, the context counts as lost."""
    monkeypatch.setattr(timing, "_graphs_off", None)
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch, "empty", lambda *a, **k: _Probe())
    monkeypatch.setattr(_Probe, "stuck", True)
    resets: list[int] = []

    def fresh() -> None:
        resets.append(1)
        if fresh_state_helps:
            _Probe.stuck = False

    monkeypatch.setattr(generator, "fresh_generator_state", fresh)
    if fresh_state_helps:
        with pytest.raises(MeasurementError, match="CUDA graph capture failed"):
            time_cuda_graph(_failing(cuda), fast_settings(), 10e-6)
        assert not _Probe.stuck
    else:
        with pytest.raises(DeviceContextLostError, match="random generator capturing") as lost:
            time_cuda_graph(_failing(cuda), fast_settings(), 10e-6)
        assert is_sticky_cuda_error(lost.value)
    assert resets == [1]


def test_a_capture_left_under_way_loses_the_context(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the failed capture left the stream capturing, no CUDA work may follow: the worker
    must restart (``DeviceContextLostError`` is sticky)."""
    monkeypatch.setattr(timing, "_graphs_off", None)
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(DeviceContextLostError, match="left the stream capturing") as caught:
        time_cuda_graph(_failing(cuda), fast_settings(), 10e-6)
    assert is_sticky_cuda_error(caught.value)


def test_the_gpu_timer_keeps_the_hosts_issue_time_apart(cuda: FakeCuda) -> None:
    device = CudaFake(update_period_s=0.001)
    timer = BlockTimer(device, cuda.clock)
    assert str(timer.stream) == "main"
    device_s, host_s = timer.block(lambda: cuda.call(2e-6, 50e-6), 10)
    assert device_s == pytest.approx(500e-6) and host_s == pytest.approx(20e-6)
    result = measure(
        lambda: cuda.call(2e-6, 50e-6),
        device,
        fast_settings(energy=False, cuda_graph_below_s=0.0),
        clock=cuda.clock,
    )
    assert result.eager.summary.median == pytest.approx(50e-6)
    assert result.eager.host_per_call_s == pytest.approx(2e-6)
    assert result.raw()["timings"][0]["host_block_s"]
    assert engine.BlockTimer is BlockTimer


def test_a_whole_model_is_captured_once_as_one_graph_whatever_its_time(cuda: FakeCuda) -> None:
    """``graph="always"`` (a whole model): one call to a graph, however slow the call; ``auto``
    leaves a slow call eager only; ``never`` any call."""
    device = CudaFake(update_period_s=0.001)
    settings = fast_settings(energy=False, graph_unroll=4)

    def slow() -> None:
        cuda.call(1e-6, 2e-3)  # 2 ms: far over cuda_graph_below_s

    auto = measure(slow, device, settings, clock=cuda.clock)
    assert [t.method for t in auto.timings] == ["eager"]
    before = cuda.log.count("call@capture")
    whole = measure(slow, device, settings, clock=cuda.clock, graph="always")
    assert [t.method for t in whole.timings] == ["eager", "graph"]
    assert cuda.log.count("call@capture") - before == 1  # captured once, not graph_unroll times
    never = measure(
        lambda: cuda.call(1e-6, 1e-6), device, settings, clock=cuda.clock, graph="never"
    )
    assert [t.method for t in never.timings] == ["eager"]
