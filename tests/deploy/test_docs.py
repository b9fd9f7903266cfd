"""docs/deploy.md names only ``opdb`` commands and options that exist, and files that exist."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

from operator_db.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "deploy.md"
_COMMAND = re.compile(r"(?<!--entrypoint )(?<!-u )\bopdb((?: [a-z][a-z-]*)+)([^`'\"|;)&]*)")
"""``opdb`` and the words after it; not where it is a value (``--entrypoint opdb``, ``-u opdb``)."""
MADE_BY_HAND = ("docker/.env", "docker/secrets/")
"""Files the guide tells the reader to create: not in the repository."""


def commands(text: str) -> list[tuple[list[str], list[str]]]:
    """Each ``opdb`` command line of ``text``: the command's path and the options written after."""
    found = []
    for line in text.splitlines():
        for match in _COMMAND.finditer(line):
            options = re.findall(r"(?<!\S)--[a-z][a-z-]*", match.group(2))
            found.append((match.group(1).split(), options))
    return found


def resolve(words: list[str]) -> tuple[str, Any]:
    """The deepest command that ``opdb WORDS...`` names (later words are its arguments)."""
    command: Any = typer.main.get_command(app)
    path: list[str] = []
    for word in words:
        subcommands = getattr(command, "commands", {})
        if word not in subcommands:
            break
        command = subcommands[word]
        path.append(word)
    return " ".join(path), command


def test_the_parser_reads_commands_and_their_options() -> None:
    text = "run `opdb worker --device nvidia:%i --lease 9` then opdb db upgrade; opdb-worker@0"
    assert commands(text) == [(["worker"], ["--device", "--lease"]), (["db", "upgrade"], [])]
    assert commands("docker run --entrypoint opdb image doctor; sudo -u opdb sh") == []


def test_every_opdb_command_and_option_in_the_guide_exists() -> None:
    found = commands(GUIDE.read_text(encoding="utf-8"))
    resolved = {resolve(words)[0] for words, _ in found}
    assert {"worker", "serve", "doctor", "db upgrade"} <= resolved
    for words, options in found:
        path, command = resolve(words)
        assert path, f"opdb {' '.join(words)}: no such command"
        known = {opt for param in command.params for opt in param.opts}
        unknown = set(options) - known - {"--help"}
        assert not unknown, f"opdb {path}: no option {sorted(unknown)}"


def test_the_files_the_guide_names_exist() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    for path in set(re.findall(r"`((?:docker|deploy|scripts|tests)/[\w./@-]+)`", text)):
        if "*" not in path and not path.startswith(MADE_BY_HAND):
            assert (ROOT / path).exists(), path
