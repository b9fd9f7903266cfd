"""Settings from ``OPDB_`` environment variables and an optional ``.env`` file."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import platformdirs
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_database_url() -> str:
    """Return the embedded default: a SQLite file in the user's data directory (not created)."""
    path = Path(platformdirs.user_data_dir("operator-db", appauthor=False)) / "operator-db.sqlite"
    return f"sqlite:///{path}"


class Settings(BaseSettings):
    """All tunables of operator-db; each field is read from ``OPDB_<FIELD>``."""

    model_config = SettingsConfigDict(
        env_prefix="OPDB_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    database_url: str = Field(
        default_factory=default_database_url,
        description="SQLAlchemy URL; a SQLite file by default, postgresql+psycopg://... to share.",
    )
    debug: bool = Field(default=False, description="Print tracebacks for errors in the CLI.")
    max_spec_bytes: int = Field(
        default=16 * 1024 * 1024, gt=0, description="Largest YAML spec accepted, in bytes."
    )
    auto_upgrade_sqlite: bool = Field(
        default=True, description="Bring a SQLite database to the latest schema on first use."
    )
    sql_echo: bool = Field(default=False, description="Log every SQL statement.")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Return the process-wide settings, read once on first call."""
    return Settings()
