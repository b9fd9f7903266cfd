"""docker/compose.yaml brought up with podman or docker, service by service, as compose would.

Compose itself cannot run on the development machines (no Docker engine; podman's compose needs
systemd for health checks), so :class:`Stack` reads the compose file the lab uses and starts each
service with the engine's own ``run``: its image, command, environment (``${...}`` filled from
:attr:`Stack.variables`), secrets (mounted read-only at ``/run/secrets/NAME``, as compose mounts a
file secret), volumes, ports, restart policy, init, stop grace period and hostname, one network
where each service is reached by its name. ``depends_on`` is honoured in order: a service waits
for ``service_healthy`` (its own health check, run in the container) and
``service_completed_successfully`` (exit 0). :func:`overrides` is all that differs here: the
images built by scripts/images.sh, the fake device instead of a GPU, ports on free numbers.
"""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
_VARIABLE = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: Any, variables: dict[str, str]) -> Any:
    """Fill compose's ``${NAME}``, ``${NAME:-default}``, ``${NAME:?error}`` in strings, deeply."""
    if isinstance(value, dict):
        return {k: interpolate(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, variables) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3)
        found = variables.get(name)
        if op in (":-", "-"):
            return found if found else arg
        if op in (":?", "?") and not found:
            raise ValueError(f"compose: {name}: {arg}")
        return found or ""

    return _VARIABLE.sub(one, value)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load(variables: dict[str, str]) -> dict[str, Any]:
    """The compose file with its ``x-`` anchors merged (YAML) and its variables filled."""
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return dict(interpolate(data, variables))


def seconds(duration: str | int | float) -> float:
    """Compose's duration (``5s``, ``2m``, ``1m30s``) in seconds."""
    if isinstance(duration, int | float):
        return float(duration)
    total = 0.0
    for number, unit in re.findall(r"([\d.]+)(ms|s|m|h)", duration):
        total += float(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    return total


@dataclass
class Stack:
    """The compose file's services run by ``engine`` under the name ``project``.

    ``secrets_dir`` holds the files of the compose file's secrets, by their names there.
    """

    engine: str
    project: str
    variables: dict[str, str]
    secrets_dir: Path
    services: dict[str, dict[str, Any]] = field(default_factory=dict)
    volumes: set[str] = field(default_factory=set)
    log: list[str] = field(default_factory=list)
    limits_pids: bool = True
    """Pass a service's ``pids_limit`` on (an engine on cgroupfs v1 may have no pids controller)."""

    def __post_init__(self) -> None:
        compose = load(self.variables)
        self.services = compose["services"]
        self.volumes = set(compose.get("volumes") or {})
        # compose's file secrets (./secrets/NAME), taken from this stack's own folder instead.
        self.secret_files = {
            name: self.secrets_dir / Path(spec["file"]).name
            for name, spec in (compose.get("secrets") or {}).items()
        }

    # -- the engine ------------------------------------------------------------------------
    def run(self, *args: str, check: bool = True, timeout: float = 300) -> str:
        """Run ``engine args``; return its stdout (raise with its stderr where it fails)."""
        done = subprocess.run(
            [self.engine, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        self.log.append(f"$ {self.engine} {shlex.join(args)} -> {done.returncode}")
        if check and done.returncode != 0:
            raise RuntimeError(f"{self.engine} {shlex.join(args)}: {done.stderr.strip()[-2000:]}")
        return done.stdout

    def container(self, service: str) -> str:
        """The container's name of ``service``."""
        return f"{self.project}-{service}"

    # -- up ------------------------------------------------------------------------------------
    def start(self, service: str) -> None:
        """Create and start ``service``'s container, as ``compose up`` would (no waiting)."""
        spec = self.services[service]
        args = ["run", "-d", "--name", self.container(service), "--network", self.project]
        args += ["--network-alias", service]
        if "hostname" in spec:
            args += ["--hostname", spec["hostname"]]
        for key, value in (spec.get("environment") or {}).items():
            args += ["-e", f"{key}={value}"]
        for name in spec.get("secrets") or []:
            source = name if isinstance(name, str) else name["source"]
            args += ["-v", f"{self.secret_files[source]}:/run/secrets/{source}:ro"]
        for volume in spec.get("volumes") or []:
            source, target = volume.split(":")[:2]
            mode = ":ro" if volume.endswith(":ro") else ""
            if source in self.volumes:
                source = f"{self.project}-{source}"
            elif source.startswith("."):
                source = str((COMPOSE.parent / source).resolve())
            args += ["-v", f"{source}:{target}{mode}"]
        for port in spec.get("ports") or []:
            args += ["-p", str(port)]
        restart = str(spec.get("restart", "no"))
        if restart != "no":
            args += ["--restart", restart]
        if spec.get("init"):
            args += ["--init"]
        if spec.get("read_only"):
            args += ["--read-only"]
        for mount in spec.get("tmpfs") or []:
            args += ["--tmpfs", mount]
        for capability in spec.get("cap_drop") or []:
            args += ["--cap-drop", capability]
        for option in spec.get("security_opt") or []:
            args += ["--security-opt", option]
        if "mem_limit" in spec:
            args += ["--memory", str(spec["mem_limit"])]
        if "pids_limit" in spec and self.limits_pids:
            args += ["--pids-limit", str(spec["pids_limit"])]
        if "stop_grace_period" in spec:
            args += ["--stop-timeout", str(int(seconds(spec["stop_grace_period"])))]
        command = spec.get("command")
        if isinstance(command, str):
            command = shlex.split(command)
        args += [spec["image"], *(command or [])]
        self.run(*args)

    def healthy(self, service: str) -> bool:
        """Run ``service``'s health check once in its container; True where it passes."""
        test = self.services[service]["healthcheck"]["test"]
        argv = ["sh", "-c", test[1]] if test[0] == "CMD-SHELL" else list(test[1:])
        timeout = seconds(self.services[service]["healthcheck"].get("timeout", "30s"))
        done = subprocess.run(
            [self.engine, "exec", self.container(service), *argv],
            capture_output=True,
            timeout=timeout + 10,
            check=False,
        )
        return done.returncode == 0

    def wait_healthy(self, service: str, limit_s: float = 120) -> None:
        """Wait for ``service``'s health check to pass."""
        end = time.monotonic() + limit_s
        while not self.healthy(service):
            if time.monotonic() > end:
                raise TimeoutError(
                    f"{service} not healthy after {limit_s:.0f} s: {self.logs(service)}"
                )
            time.sleep(1)

    def wait_exit(self, service: str, limit_s: float = 300) -> int:
        """Wait for ``service``'s container to exit; return its exit code."""
        code = self.run("wait", self.container(service), timeout=limit_s).strip()
        return int(code.splitlines()[-1])

    def order(self) -> list[str]:
        """The services in an order that starts each after what it depends on."""
        done: list[str] = []

        def visit(name: str) -> None:
            if name in done:
                return
            for dep in self.services[name].get("depends_on") or {}:
                visit(dep)
            done.append(name)

        for name in self.services:
            visit(name)
        return done

    def up(self) -> None:
        """Create the network and volumes and start every service in order, as compose does."""
        self.run("network", "create", self.project)
        for volume in self.volumes:
            self.run("volume", "create", f"{self.project}-{volume}")
        for name in self.order():
            for dep, condition in (self.services[name].get("depends_on") or {}).items():
                wanted = condition["condition"] if isinstance(condition, dict) else "started"
                if wanted == "service_healthy":
                    self.wait_healthy(dep)
                elif wanted == "service_completed_successfully":
                    code = self.wait_exit(dep)
                    if code != 0:
                        raise RuntimeError(f"{dep} exited {code}: {self.logs(dep)}")
            self.start(name)

    def logs(self, service: str) -> str:
        """The last lines of ``service``'s output."""
        done = subprocess.run(
            [self.engine, "logs", "--tail", "40", self.container(service)],
            capture_output=True,
            text=True,
            check=False,
        )
        return (done.stdout + done.stderr)[-4000:]

    def down(self) -> None:
        """Remove the containers, the volumes and the network."""
        for name in reversed(self.order()):
            self.run("rm", "-f", "-t", "5", self.container(name), check=False)
        for volume in self.volumes:
            self.run("volume", "rm", "-f", f"{self.project}-{volume}", check=False)
        self.run("network", "rm", "-f", self.project, check=False)


def overrides(services: dict[str, dict[str, Any]], tag: str, postgres: str) -> None:
    """What this machine changes of the lab's stack: the images here, the fake device, ports.

    ``postgres`` is the database's image where the compose file's cannot be pulled ("": keep it).

    The worker measures on the fake device (no GPU: no ``deploy`` reservation) with a short lease
    so that a killed worker's job comes back within the test; the ports are free ones on
    127.0.0.1.
    """
    for name, service in services.items():
        image = str(service.get("image", ""))
        if image.startswith("operator-db-"):
            service["image"] = f"{image.split(':')[0]}:{tag}"
        if name == "postgres":
            service["image"] = postgres or service["image"]
            service["ports"] = [f"127.0.0.1:{free_port()}:5432"]
        if name == "api":
            service["ports"] = [f"127.0.0.1:{free_port()}:8000"]
        if "deploy" in service:
            del service["deploy"]
            service["environment"]["OPDB_DEVICE"] = "fake"
            service["command"] = ["--lease", "15", "--poll", "0.5"]


def published(service: dict[str, Any]) -> int:
    """The host port a service's first published port is on."""
    return int(str(service["ports"][0]).split(":")[-2])
