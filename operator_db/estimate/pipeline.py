"""A GPU model as a two-stage pipeline over its calls in order: the host issues, the device runs.

For each call i of the model, in its order (``Spec.calls``): the host spends ``host_s`` issuing it
(its issue time, plus its share of the time the model spends between operators); the device
starts it once the host has issued it and the previous kernel is done; before a synchronizing
call (``Spec.syncs``: ``.item()``, ``if mask.any():``) the host waits for the device:

    issue_i = issue_{i-1} + host_i
    start_i = max(issue_i, end_{i-1});   end_i = start_i + device_i
    at a sync:  issue = max(issue, end)

``max(Σ host, Σ device)`` is what this gives for forward passes run back to back without a sync
(the host issues the next pass while the device finishes this one), which is how a model's run is
measured; it is below the pipeline wherever a sync drains the queue, since the host then waits
for the device and the device for the host in turn. The first pass alone (one request, its
result awaited) pays the pipeline's fill and drain as well. Published simulators of host and
device timelines (Lumos, dPRO, Daydream) follow the same recurrence from traces
(``../shared/notes/host-overhead.md``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

STEADY_PASSES = 4
"""Passes simulated back to back for the steady state: the last one's time is reported."""


@dataclass(frozen=True)
class Call:
    """One call of the sequence: the host's time to issue it and the device's to run it, in s."""

    host_s: float
    device_s: float


@dataclass(frozen=True)
class Pipeline:
    """A pass of the model through the two stages, in s."""

    time_s: float
    """A pass in the steady state of passes run back to back (what a measured run times)."""
    first_pass_s: float
    """One pass on its own: from its first issue to the end of its last kernel."""
    host_busy_s: float
    """The host's issue work in a pass (Σ host)."""
    device_busy_s: float
    """The device's work in a pass (Σ device)."""
    host_wait_s: float
    """Time the host waits for the device at synchronizing calls, in the steady pass."""
    syncs: int
    """Synchronizing calls in a pass."""

    @property
    def bound_by(self) -> Literal["host", "device"]:
        """The stage that idles least: the device where it is busy at least as long as the host."""
        return "device" if self.device_busy_s >= self.host_busy_s else "host"

    def as_dict(self) -> dict[str, float | int | str]:
        """Return the figures, JSON-ready."""
        return {
            "time_s": self.time_s,
            "first_pass_s": self.first_pass_s,
            "host_busy_s": self.host_busy_s,
            "device_busy_s": self.device_busy_s,
            "host_wait_s": self.host_wait_s,
            "syncs": self.syncs,
            "bound_by": self.bound_by,
        }


def simulate(calls: Sequence[Call], syncs: Sequence[int] = ()) -> Pipeline:
    """Run the recurrence over ``calls`` (``syncs``: positions before which the host waits).

    Raises:
        ValueError: a negative time, or a sync outside 0..len(calls).
    """
    if any(c.host_s < 0 or c.device_s < 0 for c in calls):
        raise ValueError("host and device times are >= 0")
    waits = sorted(set(syncs))
    if waits and (waits[0] < 0 or waits[-1] > len(calls)):
        raise ValueError(f"syncs are positions from 0 to {len(calls)}")
    before = set(waits)
    issue = end = 0.0
    ends: list[float] = []
    waited: list[float] = []
    for _ in range(STEADY_PASSES):
        wait = 0.0
        for i, call in enumerate(calls):
            if i in before and end > issue:
                wait += end - issue
                issue = end
            issue += call.host_s
            end = max(issue, end) + call.device_s
        if len(calls) in before and end > issue:
            wait += end - issue
            issue = end
        ends.append(max(issue, end))
        waited.append(wait)
    return Pipeline(
        time_s=ends[-1] - ends[-2],
        first_pass_s=ends[0],
        host_busy_s=sum(c.host_s for c in calls),
        device_busy_s=sum(c.device_s for c in calls),
        host_wait_s=waited[-1],
        syncs=len(waits),
    )


def host_stage(hollow_host_s: float | None, records: Sequence[dict[str, Any]]) -> float | None:
    """GPU: hollow-run issue time + Σ count × issue time of the recorded modules, in s.

    ``records`` are an estimate's configuration rows. None unless the hollow run's issue time is
    known and every measurable module is measured with an issue time (a partial host stage would
    understate it).
    """
    if hollow_host_s is None:
        return None
    modules = [r for r in records if r["form"] == "module"]
    if not all(r["measured"] and r["host_time_per_call_s"] is not None for r in modules):
        return None
    return hollow_host_s + math.fsum(r["count"] * r["host_time_per_call_s"] for r in modules)


def model_pipeline(
    records: Sequence[dict[str, Any]],
    calls: Sequence[int] | None,
    syncs: Sequence[int] | None,
    hollow_host_s: float | None,
) -> Pipeline | None:
    """Simulate a model's calls (positions into ``records``, in order) through the two stages.

    A call's host time is its configuration's issue time plus an even share of the time between
    operators (the hollow run's issue time minus its functional operators' issue times, which
    the hollow run still makes); its device time is the configuration's time per call. An
    opaque call costs its share of the host's time and nothing on the device (its work is in
    the hollow run's host time, where it ran). None without a call order, a hollow run's issue
    time, or an issue time for every measurable configuration.
    """
    if not calls or hollow_host_s is None:
        return None
    measurable = [r for r in records if r["form"] != "opaque"]
    if not all(r["measured"] and r["host_time_per_call_s"] is not None for r in measurable):
        return None
    functional = math.fsum(
        r["count"] * r["host_time_per_call_s"] for r in records if r["form"] == "function"
    )
    share = max(hollow_host_s - functional, 0.0) / len(calls)
    sequence = [
        Call(
            (records[p]["host_time_per_call_s"] or 0.0) + share,
            records[p]["time_per_call_s"] or 0.0,
        )
        for p in calls
    ]
    return simulate(sequence, syncs or ())


def gpu_notes(
    adds_between: bool,
    between_s: float | None,
    host_s: float | None,
    device_s: float,
    pipeline: Pipeline | None,
) -> list[str]:
    """Return what an estimate says about the GPU's two stages (nothing on a CPU)."""
    if adds_between:
        return []
    if host_s is None:
        if between_s is None:
            return []
        return [
            f"{between_s * 1e3:.3f} ms between operators (hollow run) overlaps the GPU's work: "
            "not added (no host issue times recorded for a pipeline estimate)"
        ]
    if pipeline is None:
        return [
            f"GPU pipeline: host stage {host_s * 1e3:.3f} ms (issue), device stage "
            f"{device_s * 1e3:.3f} ms (operators); the "
            f"{'host' if host_s > device_s else 'device'} bounds the model"
        ]
    return [
        f"GPU pipeline over the calls in order: {pipeline.time_s * 1e3:.3f} ms a pass back to "
        f"back, {pipeline.first_pass_s * 1e3:.3f} ms a pass alone; host busy "
        f"{pipeline.host_busy_s * 1e3:.3f} ms, device busy {pipeline.device_busy_s * 1e3:.3f} ms, "
        f"{pipeline.syncs} synchronizing calls (the host waits "
        f"{pipeline.host_wait_s * 1e3:.3f} ms); the {pipeline.bound_by} bounds the model"
    ]
