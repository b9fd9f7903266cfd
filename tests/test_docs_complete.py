"""The docs against the code: every ``opdb`` command and every API operation is described, and
nothing the docs name in code is missing from the CLI or from the OpenAPI document."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import typer

from api.app import create_app
from operator_db.cli.main import app
from operator_db.config import Settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
API_DOCS = [ROOT / "docs" / "api.md", ROOT / "docs" / "api-client.md"]
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"(?<!`)`(?!`)((?:(?!\n[ \t]*\n)[^`])+)`(?!`)")
_OPDB = re.compile(r"(?<!--entrypoint )(?<!-u )(?<![\w@:.-])opdb(?![\w@:./-])")
"""``opdb`` as a command; not a value (``--entrypoint opdb``, ``-u opdb``)
nor part of another name (``opdb-worker@0``, ``opdb:KEY``, ``/run/secrets/opdb_api_token``)."""
_WORD = re.compile(r"[a-z][a-z0-9_-]*(?:\|[a-z][a-z0-9_-]*)*")
"""What may be a subcommand (or ``a|b|c``, alternatives); placeholders (``MODEL``) and options
are not, and end the command's path."""
_OPERATION = re.compile(r"\b(" + "|".join(HTTP_METHODS) + r") (/[^\s`?,;|)]*)")


def code_of(text: str) -> list[str]:
    """The code in Markdown ``text``: each line of the fenced blocks, then each inline span
    (its whitespace collapsed: a span may wrap across lines)."""
    lines: list[str] = []
    for match in _FENCE.finditer(text):
        lines += match.group(0).splitlines()[1:-1]
    prose = _FENCE.sub("", text)
    return lines + [" ".join(span.split()) for span in _SPAN.findall(prose)]


@cache
def tree() -> Any:
    """The click command of ``opdb``."""
    return typer.main.get_command(app)


def command_paths(command: Any = None, path: tuple[str, ...] = ()) -> set[str]:
    """Every command and group of ``opdb`` as its words after ``opdb`` (``predict train``)."""
    command = tree() if command is None else command
    found = {" ".join(path)} if path else set()
    for name, sub in getattr(command, "commands", {}).items():
        if not getattr(sub, "hidden", False):
            found |= command_paths(sub, (*path, name))
    return found


def mentions(line: str) -> tuple[set[str], list[str]]:
    """The command paths an ``opdb ...`` of one line of code names, and the words that name none.

    The words after ``opdb`` are followed down the real command tree while they name a group's
    subcommand; after a command (not a group) come its arguments, which are not checked. A
    lowercase word after a group that is not one of its subcommands is an error.
    """
    named: set[str] = set()
    errors: list[str] = []
    starts = [(m.start(), m.end()) for m in _OPDB.finditer(line)]
    for (_, end), (after, _) in zip(starts, [*starts[1:], (len(line), 0)], strict=False):
        command, path = tree(), []
        for token in line[end:after].split():
            token = token.rstrip(",.;:)")
            subcommands = getattr(command, "commands", None)
            if subcommands is None or not _WORD.fullmatch(token):
                break
            words = token.split("|")
            unknown = [w for w in words if w not in subcommands]
            if unknown:
                errors.append(f"opdb {' '.join([*path, unknown[0]])}")
                break
            named |= {" ".join([*path, w]) for w in words}
            if len(words) > 1:
                break
            command, path = subcommands[token], [*path, token]
    return named, errors


def docs_mentions() -> tuple[set[str], list[str]]:
    """The command paths the docs name in code, and each wrong one with the file naming it."""
    named: set[str] = set()
    errors: list[str] = []
    for doc in DOCS:
        for line in code_of(doc.read_text(encoding="utf-8")):
            found, wrong = mentions(line)
            named |= found
            errors += [f"{doc.relative_to(ROOT)}: {e}" for e in wrong]
    return named, errors


def test_the_parser_follows_the_command_tree() -> None:
    assert mentions("opdb predict train --level 0.8 && opdb db upgrade|status") == (
        {"predict", "predict train", "db", "db upgrade", "db status"},
        [],
    )
    assert mentions("opdb measure bert-base-b1 models list") == ({"measure"}, [])
    assert mentions("opdb MODEL; opdb --help; opdb 0.1.0; opdb-worker@0 opdb:key") == (set(), [])
    assert mentions("--entrypoint opdb worker doctor; sudo -u opdb sh; /opt/x/bin/opdb jobs") == (
        {"jobs"},
        [],
    )
    assert mentions("opdb predict fit") == ({"predict"}, ["opdb predict fit"])
    assert mentions("opdb measures x") == (set(), ["opdb measures"])
    text = "a\n```bash\nopdb jobs\n```\nsee `opdb models\nlist` and ``x``"
    assert code_of(text) == ["opdb jobs", "opdb models list"]


def test_every_command_is_described() -> None:
    named, _ = docs_mentions()
    missing = sorted(command_paths() - named)
    assert not missing, f"commands no doc names as `opdb ...` in code: {missing}"


def test_every_command_the_docs_name_exists() -> None:
    _, errors = docs_mentions()
    assert not errors, f"the docs name commands that do not exist: {errors}"


@cache
def operations() -> set[tuple[str, str]]:
    """Every (method, path) of the OpenAPI document."""
    schema = create_app(Settings(database_url="sqlite://")).openapi()
    return {
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if method.upper() in HTTP_METHODS
    }


def matches(named: str, path: str) -> bool:
    """Whether a path the docs name (``/jobs/{id}``, ``/jobs/17``) is the OpenAPI ``path``.

    A parameter of the OpenAPI path takes any segment; a parameter the docs write
    (``{id}``) only matches a parameter, whatever its name.
    """
    ours, theirs = named.rstrip("/").split("/"), path.split("/")
    return len(ours) == len(theirs) and all(
        t.startswith("{") or (o == t and not o.startswith("{"))
        for o, t in zip(ours, theirs, strict=True)
    )


def named_operations(docs: list[Path]) -> list[tuple[str, str, str]]:
    """Each ``METHOD /path`` of ``docs``: the method, the path (no query), the file."""
    return [
        (method, path.rstrip("."), str(doc.relative_to(ROOT)))
        for doc in docs
        for method, path in _OPERATION.findall(doc.read_text(encoding="utf-8"))
    ]


def test_path_matching() -> None:
    assert matches("/jobs/{id}", "/jobs/{job_id}") and matches("/jobs/17", "/jobs/{job_id}")
    assert not matches("/jobs/{id}", "/jobs/counts") and not matches("/jobs", "/jobs/{job_id}")
    assert named_operations([ROOT / "docs" / "api.md"])[0][:2] == ("GET", "/health")


def test_every_operation_is_in_the_api_docs() -> None:
    named = named_operations(API_DOCS)
    missing = sorted(
        f"{method} {path}"
        for method, path in operations()
        if not any(m == method and matches(p, path) for m, p, _ in named)
    )
    assert not missing, f"operations neither docs/api.md nor docs/api-client.md names: {missing}"


def test_every_operation_the_docs_name_exists() -> None:
    wrong = [
        f"{doc}: {method} {path}"
        for method, path, doc in named_operations(DOCS)
        if not any(m == method and matches(path, p) for m, p in operations())
    ]
    assert not wrong, f"the docs name operations the API does not have: {wrong}"


def test_the_index_lists_every_page_and_the_readme_starts_with_the_guides() -> None:
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert set(re.findall(r"\]\(([\w-]+\.md)\)", index)) == pages
    start = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## ")[0]
    for guide in ("researcher.md", "api-client.md", "deploy.md", "README.md"):
        assert f"](docs/{guide})" in start, guide
