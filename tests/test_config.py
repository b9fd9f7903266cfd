"""Settings read from files: the API token from ``OPDB_API_TOKEN_FILE`` (a Docker secret)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from operator_db.config import Settings


@pytest.fixture(autouse=True)
def _no_token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPDB_API_TOKEN", raising=False)
    monkeypatch.delenv("OPDB_API_TOKEN_FILE", raising=False)


def test_token_file_gives_the_token_without_its_newline(tmp_path: Path) -> None:
    secret = tmp_path / "opdb_api_token"
    secret.write_text("s3cret-token\n", encoding="utf-8")
    settings = Settings(api_token_file=secret)
    assert settings.api_token is not None
    assert settings.api_token.get_secret_value() == "s3cret-token"


def test_token_file_is_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "token"
    secret.write_text("  from-env  ", encoding="utf-8")
    monkeypatch.setenv("OPDB_API_TOKEN_FILE", str(secret))
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.api_token is not None
    assert settings.api_token.get_secret_value() == "from-env"
    assert settings.api_token_file == secret


def test_no_token_file_leaves_the_token_alone() -> None:
    assert Settings(api_token=SecretStr("direct")).api_token == SecretStr("direct")
    assert Settings(_env_file=None).api_token_file is None  # type: ignore[call-arg]


def test_token_and_token_file_together_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("a", encoding="utf-8")
    with pytest.raises(ValidationError, match="OPDB_API_TOKEN or OPDB_API_TOKEN_FILE, not both"):
        Settings(api_token=SecretStr("b"), api_token_file=secret)


def test_missing_token_file_is_refused_with_its_path(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(ValidationError, match=f"OPDB_API_TOKEN_FILE {missing} cannot be read"):
        Settings(api_token_file=missing)


def test_empty_token_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(ValidationError, match="is empty"):
        Settings(api_token_file=empty)
