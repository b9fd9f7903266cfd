"""The CUDA random generator after a failed graph capture (torch < 2.13).

On torch 2.11 (an H100, 2026-11-25) a failed capture left the default CUDA generator's state
marked as capturing: every later random fill of the process raised "Offset increment outside
graph capture encountered unexpectedly". :func:`repair_generator` finds that with a one-element
fill and gives the generator a fresh graph-safe state with its seed.
"""

from __future__ import annotations

import torch

from operator_db.errors import DeviceContextLostError
from operator_db.ops.build import first_line


def repair_generator() -> None:
    """Give the CUDA generator a fresh state where a failed capture left it capturing.

    A random fill that fails so would fail every later one of the process (a model's weights, an
    operator's inputs).

    Raises:
        DeviceContextLostError: a random fill still fails.
    """
    probe = torch.empty(1, device="cuda")
    try:
        probe.uniform_()
        return
    except RuntimeError as exc:
        if "graph capture" not in str(exc):
            raise DeviceContextLostError(
                f"after a failed CUDA graph capture a random fill fails: {first_line(exc)}"
            ) from exc
    try:
        fresh_generator_state()
        probe.uniform_()
    except RuntimeError as exc:
        raise DeviceContextLostError(
            "a failed CUDA graph capture left the random generator capturing (torch "
            f"{torch.__version__}), and a fresh state did not help: {first_line(exc)}"
        ) from exc


def fresh_generator_state() -> None:
    """Give the current device's default CUDA generator a new graph-safe state, same seed."""
    generator = torch.cuda.default_generators[torch.cuda.current_device()]
    seed = generator.initial_seed()
    fresh = torch.Generator(device="cuda")
    generator.graphsafe_set_state(fresh.graphsafe_get_state())
    generator.manual_seed(seed)
