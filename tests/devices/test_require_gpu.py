"""OPDB_REQUIRE_GPU: the GPU tests' one rule for a host that cannot run them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import helpers
from tests.helpers import REPO


def test_skip_without_gpu_skips_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helpers, "REQUIRE_GPU", False)
    with pytest.raises(pytest.skip.Exception, match="^no GPU here$"):
        helpers.skip_without_gpu("no GPU here")


def test_skip_without_gpu_fails_where_a_gpu_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helpers, "REQUIRE_GPU", True)
    with pytest.raises(pytest.fail.Exception, match=r"^no GPU here \(OPDB_REQUIRE_GPU is set\)$"):
        helpers.skip_without_gpu("no GPU here")


def test_require_gpu_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helpers, "REQUIRE_GPU", False)
    monkeypatch.setattr(helpers, "nvml_available", lambda: (False, "NVML unavailable: test"))
    with pytest.raises(pytest.skip.Exception, match="^NVML unavailable: test$"):
        helpers.require_gpu()
    monkeypatch.setattr(helpers, "nvml_available", lambda: (True, "1 NVIDIA GPU(s)"))
    monkeypatch.setattr(helpers, "cuda_unavailable_reason", lambda: "torch is a CPU-only build")
    with pytest.raises(pytest.skip.Exception, match="^torch is a CPU-only build$"):
        helpers.require_gpu()
    monkeypatch.setattr(helpers, "cuda_unavailable_reason", lambda: None)
    helpers.require_gpu()  # NVML sees a GPU and torch has CUDA: the test runs


@pytest.mark.parametrize(("value", "outcome"), [("1", "failed"), ("", "skipped")])
def test_the_variable_turns_gpu_skips_into_failures(
    tmp_path: Path, value: str, outcome: str
) -> None:
    """A pytest run of a GPU-style test, in a child process with OPDB_REQUIRE_GPU set or not."""
    test = tmp_path / "test_needs_gpu.py"
    test.write_text(
        textwrap.dedent(
            """
            from tests.helpers import skip_without_gpu

            def test_needs_gpu():
                skip_without_gpu("no NVIDIA GPU on this host")
            """
        )
    )
    env = {**os.environ, "OPDB_REQUIRE_GPU": value, "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rsf", str(test)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert f"1 {outcome}" in run.stdout, run.stdout + run.stderr
    assert "no NVIDIA GPU on this host" in run.stdout
