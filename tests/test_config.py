"""Settings read from files (Docker secrets): the API token from ``OPDB_API_TOKEN_FILE``, the
database password from ``OPDB_DATABASE_PASSWORD_FILE``."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError
from sqlalchemy.engine import make_url

from operator_db.config import Settings


@pytest.fixture(autouse=True)
def _no_token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPDB_API_TOKEN", raising=False)
    monkeypatch.delenv("OPDB_API_TOKEN_FILE", raising=False)
    monkeypatch.delenv("OPDB_DATABASE_PASSWORD_FILE", raising=False)


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


PG = "postgresql+psycopg://opdb_api@postgres:5432/opdb?sslmode=verify-full"


def test_compose_passwords_are_secret_files_the_url_names_no_password(tmp_path: Path) -> None:
    """Finding: compose passwords in environment variables; a file puts it into the URL."""
    secret = tmp_path / "opdb_api_password"
    secret.write_text("p@ss:w/rd%\n", encoding="utf-8")
    settings = Settings(database_url=PG, database_password_file=secret)
    url = make_url(settings.database_url)
    assert url.password == "p@ss:w/rd%"
    assert (url.username, url.host, url.port, url.database) == (
        "opdb_api",
        "postgres",
        5432,
        "opdb",
    )
    assert url.query == {"sslmode": "verify-full"}


def test_database_password_file_is_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-env\n", encoding="utf-8")
    monkeypatch.setenv("OPDB_DATABASE_URL", PG)
    monkeypatch.setenv("OPDB_DATABASE_PASSWORD_FILE", str(secret))
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert make_url(settings.database_url).password == "from-env"


def test_a_password_in_the_url_and_a_file_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("a", encoding="utf-8")
    url = PG.replace("opdb_api@", "opdb_api:b@")
    with pytest.raises(ValidationError, match="give it in one place"):
        Settings(database_url=url, database_password_file=secret)


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read"), ("\n", "a password must be printable ASCII, not empty")],
)
def test_an_unreadable_or_empty_password_file_is_refused_by_name(
    tmp_path: Path, content: str | None, message: str
) -> None:
    secret = tmp_path / "pw"
    if content is not None:
        secret.write_text(content, encoding="utf-8")
    with pytest.raises(ValidationError, match=f"OPDB_DATABASE_PASSWORD_FILE: {message}"):
        Settings(database_url=PG, database_password_file=secret)


def test_a_password_file_needs_a_url_that_names_its_user(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("a", encoding="utf-8")
    with pytest.raises(ValidationError, match="names its user"):
        Settings(database_url="sqlite:////tmp/x.sqlite", database_password_file=secret)
