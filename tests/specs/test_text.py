"""One text rule for every stored free text, and device kind names that pass for known ones."""

from __future__ import annotations

from typing import Any

import pytest

from operator_db.errors import SpecError
from operator_db.specs import parse_spec
from operator_db.specs.text import skeleton, text_problem
from tests.helpers import spec_dict

RLO = "\u202e"
"""RIGHT-TO-LEFT OVERRIDE: it reversed the model page's own links from a spec's reference."""


def _with(place: str, value: str) -> dict[str, Any]:
    spec = spec_dict()
    if place == "reference":
        spec["model"]["reference"] = value
    elif place == "description":
        spec["model"]["description"] = value
    elif place == "locations":
        spec["operators"][0]["locations"] = [value]
    elif place == "tensor name":
        spec["model"]["inputs"][0]["name"] = value
    elif place == "string argument":
        spec["operators"][1]["call"] = {"args": [{"tensor": 0}], "kwargs": {"note": value}}
    return spec


@pytest.mark.parametrize(
    "place", ["reference", "description", "locations", "tensor name", "string argument"]
)
def test_bidi_and_controls_in_stored_free_text_are_refused(place: str) -> None:
    """U+202E in a spec's reference, description, locations, tensor names or string arguments
    was stored, and reversed the model page's own links."""
    for bad in (f"a{RLO}b", "a\u200bb", "a\x1b]0;x\x07b"):
        with pytest.raises(SpecError, match=r"holds a (format|control) character U\+"):
            parse_spec(_with(place, bad), "x.yaml")
    parse_spec(_with(place, "Büro ™ résumé, 東京"), "x.yaml")  # printable text is kept


def test_prose_and_json_strings_may_hold_lines() -> None:
    parse_spec(_with("description", "two\nlines\tand a tab"), "x.yaml")
    parse_spec(_with("string argument", "two\nlines"), "x.yaml")
    assert text_problem("one\nline") is not None  # a name or a reference is one line


def test_look_alike_names_share_a_skeleton() -> None:
    assert skeleton("Tesla \u0422" + "4") == skeleton("Tesla T4")  # a Cyrillic Т
    assert skeleton("NVIDIA H1OO") == skeleton("NVIDIA H100")
    assert skeleton("NVIDIA H100 PCIe") != skeleton("NVIDIA H100 80GB HBM3")
    assert skeleton("NVIDIA A100-SXM4-40GB") != skeleton("NVIDIA A100 SXM4 40GB")
