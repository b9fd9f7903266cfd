"""deploy/systemd/opdb-worker@.service: one worker per GPU, restarted after exit code 75."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from operator_db.cli.main import EXIT_RESTART

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "opdb-worker@.service"


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """A unit file as {section: {key: [values in order]}} (a key may repeat, as Environment=)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"a setting outside any section: {line}"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


@pytest.fixture(scope="module")
def service() -> dict[str, list[str]]:
    return parse_unit(UNIT.read_text(encoding="utf-8"))["Service"]


def test_parse_unit_keeps_repeated_keys() -> None:
    unit = parse_unit("[Service]\nEnvironment=A=1\nEnvironment=B=2\n")
    assert unit == {"Service": {"Environment": ["A=1", "B=2"]}}


def test_exec_start_runs_a_worker_on_the_instance_gpu(service: dict[str, list[str]]) -> None:
    (exec_start,) = service["ExecStart"]
    command = shlex.split(exec_start)
    assert Path(command[0]).name == "opdb"
    assert command[1:] == ["worker", "--device", "nvidia:%i"]


def test_exit_75_restarts_and_exit_0_does_not(service: dict[str, list[str]]) -> None:
    restart = service.get("Restart", ["no"])[-1]
    forced = " ".join(service.get("RestartForceExitStatus", [])).split()
    prevented = " ".join(service.get("RestartPreventExitStatus", [])).split()
    assert restart == "on-failure" or str(EXIT_RESTART) in forced
    assert restart in ("no", "on-failure", "on-abnormal", "on-abort", "on-watchdog")
    assert str(EXIT_RESTART) not in prevented
    assert "0" not in forced
    assert float(service["RestartSec"][-1].removesuffix("s")) >= 1


def test_settings_come_from_a_file_and_the_worker_is_not_root(
    service: dict[str, list[str]],
) -> None:
    assert service["EnvironmentFile"]
    assert service["User"][-1] not in ("root", "0")
    environment = [v for value in service.get("Environment", []) for v in shlex.split(value)]
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in environment


def test_the_unit_is_a_template_installed_for_boot() -> None:
    assert UNIT.name.endswith("@.service")
    unit = parse_unit(UNIT.read_text(encoding="utf-8"))
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]
    assert "%i" in unit["Unit"]["Description"][0]
