"""Schemathesis against the API's own OpenAPI document: every operation, every check, and links.

Each operation gets bounded, derandomized examples (positive and negative, the coverage phase
included) on a database holding two models with measured configurations; every built-in check runs
on every response (no 5xx, problem documents conform, response bodies match their schemas,
401/403 where the schema says a token is needed, ``Allow`` on 405, schema-violating requests
refused and schema-valid ones accepted). A stateful run follows the document's links (upload →
model pages → enqueue → estimate → jobs → cancel).

Schemathesis's own strategies keep integers inside the schema's bounds or just past them and
headers in ASCII, so two of ours are mixed in: integers far past 64 bits in every integer query
parameter and body field of negative examples, and non-ASCII header values (a non-ASCII bearer
token included) on any example.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import strategies as st
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events
from schemathesis.generation import GenerationMode

from tests.api.common import AUTH, api_client
from tests.helpers import measure_everything

KIND = "NVIDIA H100 80GB HBM3"
EXAMPLES = 12
"""Examples per operation and phase (the coverage phase adds its boundary cases)."""

HUGE_INTEGERS = st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, -(10**100)])
"""Integers past what any 64-bit column or C long holds."""
NON_ASCII = (
    st.text(st.characters(min_codepoint=0x80, exclude_categories=["Cs"]), min_size=1, max_size=8)
    .map(lambda text: text.encode("utf-8").decode("latin-1"))
    .filter(lambda value: value == value.strip())
)
"""Header values beyond ASCII: UTF-8 text as the bytes a client puts on the wire (obs-text)."""

CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": 20261123,
        "headers": AUTH,
        "generation": {"max-examples": EXAMPLES, "database": "none"},
        "phases": {"stateful": {"max-steps": 30}},
        "operations": [
            {
                # The spec schema cannot say which ops exist or whether shapes fit each other: a
                # schema-valid spec the door refuses is a 422 problem document, as documented.
                "include-operation-id": "upload_spec",
                "checks": {
                    "positive_data_acceptance": {"expected-statuses": ["2xx", "401", "403", "422"]}
                },
            }
        ],
    }
)


@pytest.fixture
def api_schema(db_url: str) -> Iterator[Any]:
    with api_client(db_url, ["mlp-small-b8", "mlp-deep-b8"]) as client:  # the store is open
        measure_everything(db_url, KIND)
        schema = schemathesis.openapi.from_asgi("/openapi.json", client.app, config=CONFIG)
        _add_hostile_strategies(schema)
        yield schema


def _add_hostile_strategies(schema: Any) -> None:
    @schema.hook  # type: ignore[misc]
    def flatmap_case(context: Any, case: Any) -> st.SearchStrategy[Any]:
        negative = case.meta is not None and case.meta.generation.mode == GenerationMode.NEGATIVE
        return st.tuples(st.booleans(), HUGE_INTEGERS, st.booleans(), NON_ASCII).map(
            lambda drawn: _hostile(case, negative, *drawn)
        )


def _hostile(case: Any, negative: bool, huge: bool, value: int, odd: bool, text: str) -> Any:
    if negative and huge:
        case.query = _huge(case.query, value)
        case.body = _huge(case.body, value)
    if odd:
        headers = dict(case.headers or {})
        headers["X-Note"] = text
        if negative:
            headers["Authorization"] = f"Bearer {text}"
        case.headers = headers
    return case


def _huge(part: Any, value: int) -> Any:
    """Return ``part`` with every integer in it, however deep, replaced by ``value``."""
    if isinstance(part, dict):
        return {key: _huge(item, value) for key, item in part.items()}
    if isinstance(part, list):
        return [_huge(item, value) for item in part]
    return value if isinstance(part, int) and not isinstance(part, bool) else part


def _run(schema: Any) -> tuple[list[str], int, int]:
    """Run every phase; return the failures (one line and a curl each), cases and transitions."""
    failures: list[str] = []
    cases = transitions = 0
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.PhaseStarted) and event.payload is not None:
            transitions = event.payload.transitions_selected
        if isinstance(event, events.ScenarioFinished | events.FuzzScenarioFinished):
            cases += len(event.recorder.cases)
            for case_id, checks in event.recorder.checks.items():
                for check in checks:
                    if check.failure_info is not None:
                        failure = check.failure_info.failure
                        interaction = event.recorder.interactions.get(case_id)
                        response = interaction and interaction.response
                        status = (
                            (response.status_code, response.content[:300]) if response else None
                        )
                        failures.append(
                            f"{event.recorder.label}: {check.name} ({status}): {failure.title}: "
                            f"{failure.message}\n    {check.failure_info.code_sample}"
                        )
        if isinstance(event, events.NonFatalError | events.FatalError):
            failures.append(f"error: {event.info.format()}")
    return failures, cases, transitions


def test_schemathesis_finds_nothing(api_schema: Any) -> None:
    failures, cases, transitions = _run(api_schema)
    assert not failures, "\n".join(dict.fromkeys(failures))
    operations = len(list(api_schema.get_all_operations()))
    assert operations >= 20 and cases >= operations * EXAMPLES
    assert transitions >= 15  # the stateful phase walked the links
