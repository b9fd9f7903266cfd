"""Settings from ``OPDB_`` variables and a ``.env`` file (``operator_db/config_env.py``), and a
bad value's one-line error (``get_settings``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from operator_db.cli.main import main
from operator_db.config import Settings, get_settings
from operator_db.config_env import environment_values, variable_names
from operator_db.errors import ConfigurationError


def test_a_field_is_read_in_any_case_and_unknown_names_are_ignored() -> None:
    found = environment_values(
        Settings,
        prefix="OPDB_",
        env_file=None,
        environ={"opdb_device": "fake", "OPDB_NO_SUCH": "x", "PATH": "/bin", "OPDBX_DEBUG": "1"},
    )
    assert found == {"device": "fake"}


def test_nested_fields_merge_over_a_whole_json_value() -> None:
    environ = {"OPDB_MEASURE": '{"trials": 3, "blocks": 4}', "OPDB_MEASURE__BLOCKS": "7"}
    found = environment_values(Settings, prefix="OPDB_", env_file=None, environ=environ)
    assert found == {"measure": {"trials": 3, "blocks": "7"}}


def test_lists_take_json_and_plain_text_is_refused_by_name() -> None:
    found = environment_values(
        Settings, prefix="OPDB_", env_file=None, environ={"OPDB_API_ALLOWED_HOSTS": '["a", "b"]'}
    )
    assert found == {"api_allowed_hosts": ["a", "b"]}
    refused = 'OPDB_API_WRITE_TOKENS must be JSON, e.g. \\["a", "b"\\]$'
    with pytest.raises(ValueError, match=refused):
        environment_values(
            Settings, prefix="OPDB_", env_file=None, environ={"OPDB_API_WRITE_TOKENS": "s3cret"}
        )


def test_the_environment_wins_over_the_env_file_and_arguments_over_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text(
        "OPDB_DEVICE=cpu\nOPDB_SQL_ECHO=true\nOPDB_MEASURE__TRIALS=5\n", encoding="utf-8"
    )
    monkeypatch.setenv("OPDB_DEVICE", "fake")
    settings = Settings(api_token=SecretStr("given"))
    assert (settings.device, settings.sql_echo, settings.measure.trials) == ("fake", True, 5)
    assert Settings(device="nvidia").device == "nvidia"
    assert Settings(_env_file=None).sql_echo is False
    assert {"device", "sql_echo", "measure", "api_token"} <= settings.model_fields_set


def test_settings_validate_what_the_environment_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPDB_MEASURE__BLOCKS", "3")
    monkeypatch.setenv("OPDB_API_READ_TOKENS", '["r1"]')
    settings = Settings()
    assert settings.measure.blocks == 3
    assert settings.api_read_tokens == [SecretStr("r1")]
    monkeypatch.setenv("OPDB_MEASURE__NO_SUCH", "1")
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Settings()


@pytest.mark.parametrize(
    ("name", "value", "line"),
    [
        (
            "OPDB_API_MAX_BODY_BYTES",
            "lots",
            "OPDB_API_MAX_BODY_BYTES: Input should be a valid integer, unable to parse string "
            "as an integer (given 'lots')",
        ),
        (
            "OPDB_MEASURE__BLOCKS",
            "x",
            "OPDB_MEASURE__BLOCKS: Input should be a valid integer, unable to parse string as "
            "an integer (given 'x')",
        ),
        ("OPDB_API_WRITE_TOKENS", "s3cret", 'OPDB_API_WRITE_TOKENS must be JSON, e.g. ["a", "b"]'),
        ("OPDB_MEASURE", "trials=2", 'OPDB_MEASURE must be JSON, e.g. {"name": value}'),
        ("OPDB_DATABASE_PASSWORD_FILE", "/nonexistent/pw", None),
    ],
)
def test_a_bad_value_is_one_line_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    value: str,
    line: str | None,
) -> None:
    monkeypatch.setenv(name, value)
    if name == "OPDB_DATABASE_PASSWORD_FILE":
        monkeypatch.setenv("OPDB_DATABASE_URL", "postgresql+psycopg://me@db/opdb")
    with pytest.raises(ConfigurationError) as caught:
        get_settings()
    message = str(caught.value)
    assert "\n" not in message
    if line is not None:
        assert message == line
    else:
        assert message.startswith("OPDB_DATABASE_PASSWORD_FILE: cannot read /nonexistent/pw")
    assert main(["models", "list"]) == 1
    assert capsys.readouterr().err.strip() == f"error: {message}"


def test_every_name_the_reader_lists_is_read() -> None:
    """``variable_names`` (what compose files are checked against) and the reader agree."""
    names = variable_names(Settings, "OPDB_")
    assert {"OPDB_DEVICE", "OPDB_MEASURE", "OPDB_MEASURE__TRIALS"} <= names
    nested = {n for n in names if n.startswith("OPDB_MEASURE__")}
    found = environment_values(
        Settings, prefix="OPDB_", env_file=None, environ=dict.fromkeys(nested, "1")
    )
    assert set(found["measure"]) == {n.removeprefix("OPDB_MEASURE__").lower() for n in nested}
