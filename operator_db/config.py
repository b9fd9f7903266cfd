"""Settings from ``OPDB_`` environment variables and an optional ``.env`` file."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import platformdirs
from pydantic import Field, SecretStr
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
    device: str = Field(
        default="auto",
        description="Device to measure on: auto (NVIDIA if NVML sees a GPU, else cpu), cpu, "
        "nvidia[:N] (or cuda[:N]), or fake.",
    )
    fake_power_w: float = Field(
        default=100.0, ge=0, description="Fake device: constant power draw, in W."
    )
    fake_update_period_s: float = Field(
        default=0.02, gt=0, description="Fake device: energy counter update period, in s."
    )
    fake_energy_counter: bool = Field(
        default=True,
        description="Fake device: has an energy counter (false: energy from power integration).",
    )
    fake_fail: str = Field(
        default="",
        description="Fake device: comma-separated operations that always fail with a DeviceError "
        "(open, energy, power, telemetry, synchronize).",
    )
    api_token: SecretStr | None = Field(
        default=None,
        description="Bearer token the REST API asks of writes; unset, the API refuses writes.",
    )
    api_protect_reads: bool = Field(
        default=False, description="Ask the API token of reads too (reads are open by default)."
    )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Return the process-wide settings, read once on first call."""
    return Settings()
