"""The YAML loader of specs: libyaml's parser, bounded nesting and aliases, one-line errors."""

from __future__ import annotations

import time
import tracemalloc

import pytest
import yaml

from operator_db.errors import SpecError
from operator_db.specs import loader
from operator_db.specs.io import load_yaml_text
from operator_db.specs.loader import C_PARSER, MAX_ALIASES, MAX_DEPTH
from tests.helpers import EXAMPLE_SPECS


def yaml_error(text: str) -> str:
    with pytest.raises(SpecError) as info:
        load_yaml_text(text, "x.yaml")
    message = str(info.value)
    assert "\n" not in message
    return message


def billion_laughs() -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    previous = "a"
    for name in "bcdefghi":
        text += f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]\n"
        previous = name
    return text


def test_libyaml_parses() -> None:
    assert C_PARSER, "PyYAML is built with libyaml here; the loader must use its parser"


def test_billion_laughs_fails_fast_in_little_memory() -> None:
    text = billion_laughs()
    assert len(text) < 600
    tracemalloc.start()
    start = time.perf_counter()
    try:
        message = yaml_error(text)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.perf_counter() - start < 1.0
    assert peak < 5 * 1024 * 1024
    assert message == (
        "x.yaml: line 6, column 8: YAML over a limit: aliases expand to more than 100000 nodes"
    )


def test_too_many_aliases() -> None:
    text = "a: &a 1\nb: [" + ",".join(["*a"] * (MAX_ALIASES + 1)) + "]\n"
    assert yaml_error(text).endswith(f"YAML over a limit: more than {MAX_ALIASES} aliases")


def test_recursive_alias() -> None:
    assert yaml_error("a: &a [1, *a]\n") == (
        "x.yaml: line 1, column 11: YAML over a limit: alias *a refers to itself"
    )


def test_a_few_aliases_and_merges_are_read() -> None:
    text = "base: &b {x: 1}\nc: {<<: *b, y: 2}\nd: [*b, *b]\n"
    assert load_yaml_text(text, "x.yaml") == {
        "base": {"x": 1},
        "c": {"x": 1, "y": 2},
        "d": [{"x": 1}, {"x": 1}],
    }


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("[" * 1000 + "]" * 1000, "line 1, column 65"),
        ("{a: " * 1000 + "1" + "}" * 1000, "line 1, column 254"),
        ("".join("  " * i + "a:\n" for i in range(1000)), "line 64, column 127"),
        ("[" * 16_000_000, "line 1, column 65"),
    ],
    ids=["flow-lists", "flow-maps", "block-maps", "16M-open-brackets"],
)
def test_deep_nesting_is_refused_not_a_recursion_error(text: str, where: str) -> None:
    start = time.perf_counter()
    message = yaml_error(text)
    assert time.perf_counter() - start < 1.0
    assert message == f"x.yaml: {where}: YAML over a limit: nested deeper than {MAX_DEPTH} levels"


class _RefusingLoader(loader.SpecLoader):
    """libyaml as a release with a limit of its own might be: it refuses every document."""

    reads = 0

    def get_single_data(self) -> object:
        type(self).reads += 1
        raise yaml.scanner.ScannerError(
            "while increasing flow level", None, "exceeded maximum nesting depth", None
        )


def test_a_limit_of_libyaml_s_own_is_not_the_project_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """The project's limits decide, whatever the library refuses by itself first."""
    monkeypatch.setattr(loader, "SpecLoader", _RefusingLoader)
    assert load_yaml_text("a: [[1]]", "x.yaml") == {"a": [[1]]}
    assert yaml_error("[" * 2000) == (
        f"x.yaml: line 1, column 65: YAML over a limit: nested deeper than {MAX_DEPTH} levels"
    )
    assert _RefusingLoader.reads == 2


def test_other_libyaml_errors_are_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(loader, "PythonSpecLoader", lambda text: calls.append(text))
    assert "invalid YAML" in yaml_error("a: [1, 2")
    assert calls == []


def test_nesting_up_to_the_limit_is_read() -> None:
    value = load_yaml_text("[" * MAX_DEPTH + "]" * MAX_DEPTH, "x.yaml")
    for _ in range(MAX_DEPTH - 1):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: " + "9" * 5000, "cannot read this value: Exceeds the limit (4300 digits)"),
        ("a: 2024-02-30", "cannot read this value: day is out of range for month"),
        ("? [1]\n: 2\n", "a mapping's key must be a scalar"),
    ],
)
def test_values_python_cannot_hold_are_yaml_errors(text: str, message: str) -> None:
    assert f"invalid YAML: {message}" in yaml_error(text)


def test_the_loader_reads_what_pyyaml_reads() -> None:
    for path in EXAMPLE_SPECS.glob("*.yaml"):
        text = path.read_text()
        assert load_yaml_text(text, path.name) == yaml.safe_load(text)
