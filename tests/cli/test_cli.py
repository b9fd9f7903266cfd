"""The ``opdb`` command: ingest, db, models, demo; one-line errors that leave the database as is."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import inspect
from typer.main import get_command_name

from operator_db.cli.main import app, app_for
from operator_db.config import FAST_FAKE_MEASURE
from operator_db.db.engine import make_engine
from operator_db.db.migrate import head_revision
from operator_db.db.queries import row_counts
from operator_db.db.store import Store
from tests.conftest import POSTGRES_URL
from tests.helpers import (
    EXAMPLE_SPECS,
    linear_op,
    run_cli,
    snapshot,
    spec_dict,
    sqlite_size_capped,
)

HEAD = head_revision()
"""The newest migration: what every command expects."""


def counts_of(url: str) -> dict[str, int]:
    store = Store.open(url, migrate=False)
    try:
        with store.transaction() as session:
            return row_counts(session)
    finally:
        store.close()


def test_ingest_examples_same_counts_on_both_backends(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'fresh.sqlite'}"
    pg_url = next(request.getfixturevalue("postgres_fresh"))
    results = {}
    for url in (sqlite_url, pg_url):
        if url.startswith("postgresql"):
            assert run_cli(capsys, "db", "upgrade", "--db", url).code == 0
        first = run_cli(capsys, "ingest", str(EXAMPLE_SPECS), "--db", url)
        assert first.code == 0, first.err
        assert "new" in first.out
        engine = make_engine(url)
        before = snapshot(engine)
        second = run_cli(capsys, "ingest", str(EXAMPLE_SPECS), "--db", url)
        assert second.code == 0, second.err
        assert "unchanged" in second.out and "│ new " not in second.out
        assert snapshot(engine) == before
        engine.dispose()
        results[url] = counts_of(url)
    assert results[sqlite_url] == results[pg_url]
    assert results[sqlite_url]["models"] == len(list(EXAMPLE_SPECS.glob("*.yaml")))


@pytest.fixture
def postgres_fresh() -> Any:
    from tests.conftest import _fresh_postgres

    return _fresh_postgres(None)


def _bad_specs(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Malformed specs: file name → (content, expected message after 'error: <path>: ')."""

    def dump(data: Any) -> str:
        return yaml.safe_dump(data)

    negative = spec_dict("bad")
    negative["operators"][0]["inputs"][0]["shape"][1] = -1
    wrong_type = spec_dict("bad")
    wrong_type["operators"][1]["flops"] = "many"
    unknown = spec_dict("bad")
    unknown["model"]["colour"] = "red"
    version = spec_dict("bad")
    version["spec_version"] = 99
    zero = spec_dict("bad")
    zero["model"]["inputs"][0]["shape"] = [0]
    return {
        "broken.yaml": ("spec_version: 1\nmodel: [\n", "line 3, column 1: invalid YAML"),
        "negative.yaml": (
            dump(negative),
            "operators[0].inputs[0].shape[1]: must be positive, got -1",
        ),
        "wrong_type.yaml": (
            dump(wrong_type),
            "operators[1].flops: input should be a valid integer",
        ),
        "unknown.yaml": (dump(unknown), "model.colour: unknown field"),
        "version.yaml": (dump(version), "spec_version: unknown spec_version 99"),
        "zero.yaml": (dump(zero), "model.inputs[0].shape[0]: must be positive, got 0"),
    }


def test_malformed_specs_fail_in_one_line_and_change_nothing(
    capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path
) -> None:
    assert run_cli(capsys, "ingest", str(EXAMPLE_SPECS), "--db", db_url).code == 0
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(spec_dict("good", [linear_op(3, 5)])))
    engine = make_engine(db_url)
    before = snapshot(engine)
    for name, (content, expected) in _bad_specs(tmp_path).items():
        path = tmp_path / name
        path.write_text(content)
        # The good spec comes first: it must not be written either.
        result = run_cli(capsys, "ingest", str(good), str(path), "--db", db_url)
        assert result.code == 1, name
        assert result.out == ""
        lines = result.err.strip().splitlines()
        assert len(lines) == 1, result.err
        assert lines[0].startswith(f"error: {path}: {expected}"), lines[0]
        assert snapshot(engine) == before, name
    engine.dispose()


def test_fifty_megabyte_spec(
    capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "big.yaml"
    with path.open("w") as f:
        for i in range(50 * 1024):
            f.write(f"# {i:08d} " + "x" * 1010 + "\n")
    engine = make_engine(db_url)
    before = snapshot(engine)
    result = run_cli(capsys, "ingest", str(path), "--db", db_url)
    assert result.code == 1
    assert result.err.strip() == (
        f"error: {path}: file is {path.stat().st_size} bytes, over the limit of 16777216 bytes "
        "(OPDB_MAX_SPEC_BYTES)"
    )
    assert snapshot(engine) == before
    engine.dispose()


def test_changed_spec_says_it_replaced(
    capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "toy.yaml"
    data = spec_dict("toy")
    path.write_text(yaml.safe_dump(data))
    assert run_cli(capsys, "ingest", str(path), "--db", db_url).code == 0
    changed = copy.deepcopy(data)
    changed["operators"][0]["count"] = 4
    path.write_text(yaml.safe_dump(changed))
    result = run_cli(capsys, "ingest", str(path), "--db", db_url)
    assert result.code == 0
    assert f"{path}: content changed, replaced the operator list of toy" in result.out
    assert counts_of(db_url)["model_operators"] == 2


def test_mark_processed(capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path) -> None:
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(spec_dict("toy")) + "processed: false\n")
    assert run_cli(capsys, "ingest", str(path), "--db", db_url, "--mark-processed").code == 0
    assert path.read_text().endswith("processed: true\n")
    # Marking is not content: ingesting the marked file changes nothing.
    assert "unchanged" in run_cli(capsys, "ingest", str(path), "--db", db_url).out


def test_unreachable_database_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    url = "postgresql+psycopg://postgres:secret@127.0.0.1:1/none"
    result = run_cli(capsys, "ingest", str(EXAMPLE_SPECS), "--db", url)
    assert result.code == 1
    lines = result.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        "error: database postgresql+psycopg://postgres:***@127.0.0.1:1/none is unavailable: "
    )
    assert "secret" not in result.err


def test_a_full_disk_is_one_line_saying_so_and_reads_go_on(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'full.sqlite'}"
    toy, wide = tmp_path / "toy.yaml", tmp_path / "wide.yaml"
    toy.write_text(yaml.safe_dump(spec_dict("toy")))
    wide.write_text(yaml.safe_dump(spec_dict("wide", [linear_op(inp=8 + i) for i in range(200)])))
    assert run_cli(capsys, "ingest", str(toy), "--db", url).code == 0
    with sqlite_size_capped():  # SQLite fails a write that grows the file as on a full disk
        full = run_cli(capsys, "ingest", str(wide), "--db", url)
        listed = run_cli(capsys, "models", "list", "--db", url)
    assert full.code == 1
    [line] = full.err.strip().splitlines()  # before: "database … is unavailable: database or …"
    assert line.startswith(f"error: database {url}: the disk is full (database or disk is full; ")
    assert line.endswith(
        f" free in {tmp_path.resolve()}): nothing of the transaction was written; "
        "free space and retry"
    )
    assert listed.code == 0 and "toy" in listed.out and "wide" not in listed.out


def test_postgres_behind_head_is_not_migrated_silently(
    capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    url = next(request.getfixturevalue("postgres_fresh"))
    result = run_cli(capsys, "ingest", str(EXAMPLE_SPECS), "--db", url)
    assert result.code == 1
    assert f"is empty, the code expects {HEAD}: run `opdb db upgrade`" in result.err
    engine = make_engine(url)
    assert inspect(engine).get_table_names() == []
    engine.dispose()


def test_sqlite_default_is_created_and_upgraded_on_first_use(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # conftest points OPDB_DATABASE_URL at tmp_path/default.sqlite, which does not exist yet.
    # The whole main job, on a small model and the fake device so that it takes seconds.
    for name, value in FAST_FAKE_MEASURE.items():
        monkeypatch.setenv(name, value)
    args = [
        "demo",
        "--model",
        "module:operator_db.examples:mlp",
        "--input",
        "8x784",
        "--name",
        "demo-mlp",
        "--device",
        "fake",
        "--out",
        str(tmp_path / "out"),
    ]
    result = run_cli(capsys, *args)
    assert result.code == 0, result.err
    assert (tmp_path / "default.sqlite").exists()
    assert "mlp-small-b8" in result.out and "demo-mlp" in result.out
    assert "operators (Σ count × per-call)" in result.out and "between operators" in result.out
    assert "12 runs measured, 0 stored before, 0 failed" in result.out  # the small study
    for made in ("demo-mlp.yaml", "roofline.png", "report/report.md", "report/report.html"):
        assert (tmp_path / "out" / made).stat().st_size > 0, made
    report = (tmp_path / "out" / "report" / "report.md").read_text()
    assert "4 models in the study" not in report and "13 models in the study" in report
    for empty in ("at two or more batch sizes", "no training spec has a full-model run"):
        assert empty not in report, empty  # the study fills these sections
    status = run_cli(capsys, "db", "status")
    assert f"revision: {HEAD} (code expects {HEAD})" in status.out
    again = run_cli(capsys, *args)
    assert again.code == 0, again.err
    assert "unchanged" in again.out and "0 runs measured, 12 stored before" in again.out
    assert "measured before; `opdb peaks` without --missing measures again" in again.out


def test_models_list_and_show(capsys: pytest.CaptureFixture[str], db_url: str) -> None:
    assert run_cli(capsys, "ingest", str(EXAMPLE_SPECS), "--db", db_url).code == 0
    listing = run_cli(capsys, "models", "list", "--db", db_url)
    assert listing.code == 0
    assert "mlp-deep-b8" in listing.out and "mlp-small-b8" in listing.out
    names = run_cli(capsys, "models", "list", "--names", "--db", db_url)
    assert names.code == 0 and "mlp-small-b8" in names.out.split("\n")
    assert all(" " not in line for line in names.out.splitlines())  # names only, for a shell loop
    shown = run_cli(capsys, "models", "show", "mlp-small-b8", "--db", db_url)
    assert shown.code == 0 and "torch.nn.Linear" in shown.out and "8x784" in shown.out
    missing = run_cli(capsys, "models", "show", "resnet", "--db", db_url)
    assert missing.code == 1
    assert missing.err.strip().startswith("error: no model named 'resnet'; known: ")
    assert "resnet50-b1" in missing.err


def test_db_downgrade_and_upgrade(capsys: pytest.CaptureFixture[str], db_url: str) -> None:
    assert run_cli(capsys, "db", "downgrade", "base", "--db", db_url).code == 0
    engine = make_engine(db_url)
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    engine.dispose()
    up = run_cli(capsys, "db", "upgrade", "--db", db_url)
    assert up.code == 0 and f"at revision {HEAD}" in up.out


def test_usage_error_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "--version").out.strip() == "opdb 0.1.0"
    bad = run_cli(capsys, "ingest")
    assert bad.code == 2 and "Missing argument" in bad.err


def test_a_command_named_first_is_built_alone_and_anything_else_gets_the_whole_app(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``main.app_for``: typer builds every command it holds at each start (35 ms for all)."""
    whole = [info.name for info in app.registered_groups] + [
        info.name or get_command_name(info.callback.__name__)
        for info in app.registered_commands
        if info.callback is not None
    ]
    assert len(whole) == len(set(whole)) > 20
    for name in whole:
        one = app_for([name, "--help"])
        held = [info.name for info in one.registered_groups] + [
            info.name or get_command_name(info.callback.__name__)
            for info in one.registered_commands
            if info.callback is not None
        ]
        assert held == [name]
        assert one.registered_callback is app.registered_callback
    for args in ([], ["--version"], ["--help"], ["modls", "list"]):
        assert app_for(args) is app
    shown = run_cli(capsys, "models", "--help")
    assert shown.code == 0 and "Usage: opdb models" in shown.out and "list" in shown.out
    typo = run_cli(capsys, "modls")
    assert typo.code == 2 and "Did you mean 'models'?" in typo.err
    imported = run_cli(capsys, "import", "--help")
    assert imported.code == 0 and "Usage: opdb import" in imported.out


def test_console_script_debug_traceback(tmp_path: Path) -> None:
    """The installed entry point: one line by default, a traceback with OPDB_DEBUG=1."""
    missing = tmp_path / "missing.yaml"
    cmd = [sys.executable, "-m", "operator_db", "ingest", str(missing)]
    env = {"PATH": "/usr/bin:/bin", "OPDB_DATABASE_URL": f"sqlite:///{tmp_path / 'x.sqlite'}"}
    plain = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    assert plain.returncode == 1
    assert plain.stderr.strip() == (
        f"error: {missing}: no such file, or no spec (*.yaml, *.yml) matches it"
    )
    debug = subprocess.run(
        cmd, capture_output=True, text=True, env={**env, "OPDB_DEBUG": "1"}, check=False
    )
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
    assert "SpecError" in debug.stderr


def test_postgres_url_constant_points_at_a_server() -> None:
    assert POSTGRES_URL.startswith("postgresql")


MARKUP = "[link=https://evil.example]docs[/link] [bold red]x[/] :skull:"
"""Free text a spec may hold that Rich would read as a hyperlink, a style and an emoji."""


def test_stored_free_text_is_printed_as_it_is(
    capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path
) -> None:
    spec = spec_dict("markup")
    spec["model"]["reference"] = MARKUP
    path = tmp_path / "markup.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert run_cli(capsys, "ingest", str(path), "--db", db_url).code == 0
    listing = run_cli(capsys, "models", "list", "--db", db_url)
    assert listing.code == 0 and MARKUP in listing.out
    missing = run_cli(capsys, "models", "show", MARKUP, "--db", db_url)
    assert missing.code == 1 and f"no model named {MARKUP!r}" in missing.err


ESCAPES = "\x1b]8;;https://evil.example\x1b\\docs\x1b]8;;\x1b\\ \x1b]0;pwned\x07 \x9b31m"
"""A spec's reference holding an OSC 8 hyperlink, an OSC 0 window title and a C1 CSI."""


def test_stored_escapes_cannot_command_the_terminal(
    capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path
) -> None:
    """`opdb models list` wrote a reference's OSC 8 and OSC 0 sequences raw. Specs holding them
    are refused now (specs/text.py); one stored before is printed escaped."""
    from sqlalchemy import update

    from operator_db.db.models import Model

    path = tmp_path / "escapes.yaml"
    path.write_text(yaml.safe_dump(spec_dict("escapes")))
    assert run_cli(capsys, "ingest", str(path), "--db", db_url).code == 0
    with Store.open(db_url) as store, store.transaction() as session:
        session.execute(update(Model).values(reference=ESCAPES))
    listing = run_cli(capsys, "models", "list", "--db", db_url)
    assert listing.code == 0
    assert "\x1b" not in listing.out and "\x07" not in listing.out and "\x9b" not in listing.out
    assert "\\x1b]8;;https://evil.example" in listing.out and "\\x9b31m" in listing.out
