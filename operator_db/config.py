"""Settings from ``OPDB_`` environment variables and an optional ``.env`` file."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import platformdirs
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from operator_db.config_env import environment_values
from operator_db.config_measure import ENERGY_PLANS, EnergyPlan, MeasureSettings
from operator_db.errors import ConfigurationError

__all__ = [
    "ENERGY_PLANS",
    "FAST_FAKE_MEASURE",
    "EnergyPlan",
    "MeasureSettings",
    "Settings",
    "default_database_url",
    "get_settings",
    "password_from",
]


def password_from(path: Path | None, value: str | None, what: str) -> str | None:
    """Return a password from a file (its content, less the line end) or a value given, or None.

    The one rule for passwords given to operator-db: the database's (``database_password_file``)
    and the roles' (``opdb db roles``, ``db/passwords.py``).

    Raises:
        ValueError: both given, the file cannot be read, or the password is empty or not
            printable ASCII.
    """
    if path is not None and value is not None:
        raise ValueError(f"{what}: give the password in a file or a variable, not both")
    if path is not None:
        try:
            value = path.read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{what}: cannot read {path}: {exc}") from None
    if value is None:
        return None
    if not value or not all(" " <= c <= "~" for c in value):
        raise ValueError(
            f"{what}: a password must be printable ASCII, not empty "
            "(e.g. `openssl rand -base64 32`)"
        )
    return value


def default_database_url() -> str:
    """Return the embedded default: a SQLite file in the user's data directory (not created)."""
    path = Path(platformdirs.user_data_dir("operator-db", appauthor=False)) / "operator-db.sqlite"
    return f"sqlite:///{path}"


ENV_PREFIX = "OPDB_"
"""The prefix of the settings' environment variables: ``OPDB_<FIELD>``, ``OPDB_<FIELD>__<SUB>``."""


class Settings(BaseModel):
    """All tunables of operator-db; each field is read from ``OPDB_<FIELD>``.

    Values given to the constructor win over the environment, which wins over a ``.env`` file in
    the working directory (``_env_file`` names another, or None for none);
    :mod:`operator_db.config_env` reads them.
    """

    model_config = ConfigDict(extra="ignore")

    def __init__(self, _env_file: Path | str | None = Path(".env"), **values: Any) -> None:
        """Validate ``values`` over the ``OPDB_`` variables (and ``_env_file``'s)."""
        env_file = None if _env_file is None else Path(_env_file)
        found = environment_values(type(self), prefix=ENV_PREFIX, env_file=env_file)
        super().__init__(**{**found, **values})

    database_url: str = Field(
        default_factory=default_database_url,
        description="SQLAlchemy URL; a SQLite file by default, postgresql+psycopg://... to share.",
    )
    database_password_file: Path | None = Field(
        default=None,
        description="A file holding the database password (its first line; a Docker or systemd "
        "secret, e.g. /run/secrets/opdb_worker_password), put into database_url, which then "
        "names the user but no password. Not with a password in the URL; an --db option's URL "
        "is taken as given.",
    )
    debug: bool = Field(default=False, description="Print tracebacks for errors in the CLI.")
    max_spec_bytes: int = Field(
        default=16 * 1024 * 1024, gt=0, description="Largest YAML spec accepted, in bytes."
    )
    max_tensor_numel: int = Field(
        default=2**33,
        gt=0,
        le=2**40,
        description="Largest tensor a spec may ask for, in elements (inputs, outputs, a strided "
        "input's storage, a module's parameters and buffers together); checked where specs come "
        "in. 2**40 is the format's own limit.",
    )
    max_tensor_bytes: int = Field(
        default=2**35,
        gt=0,
        description="Largest tensor a spec may ask for or make a call create, in bytes (32 GiB: "
        "a complex128 element is 16 bytes); checked where specs come in.",
    )
    max_call_flops: float = Field(
        default=1e14,
        gt=0,
        description="Most FLOPs one call of a spec's operator may cost (1e14: about 0.1 s of an "
        "H100's dense float16, many minutes of a CPU); checked where specs come in.",
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
        description="A bearer token the REST API accepts for writes (and reads); with no write "
        "token at all the API refuses writes.",
    )
    api_token_file: Path | None = Field(
        default=None,
        description="A file holding api_token instead (a Docker or systemd secret, e.g. "
        "/run/secrets/opdb_api_token), read with the settings; surrounding whitespace is "
        "dropped. Not together with api_token.",
    )
    api_write_tokens: list[SecretStr] = Field(
        default_factory=list,
        description="More write tokens (JSON list), e.g. one per client, to revoke one alone.",
    )
    api_read_tokens: list[SecretStr] = Field(
        default_factory=list,
        description="Tokens that may read but not write (JSON list); they matter where reads are "
        "protected.",
    )
    api_protect_reads: bool = Field(
        default=False, description="Ask a token of reads too (reads are open by default)."
    )
    api_public_origin: str | None = Field(
        default=None,
        description="The origin browsers reach the server at, e.g. https://opdb.example.org "
        "behind a proxy that terminates TLS: redirects are built on it, the pages' login cookie "
        "is Secure where it is https, and forms are taken only from it. Unset: redirects are "
        "relative (Location: /path) and a form must come from the host the request names.",
    )
    estimate_between_ops_warn: float = Field(
        default=0.10,
        ge=0,
        le=1,
        description="An estimate whose time between operators (hollow run, added on a CPU) is "
        "more than this share of it carries a warning, as a coverage gap does: opaque work runs "
        "there.",
    )
    api_concurrency: int = Field(
        default=8,
        ge=1,
        le=14,
        description="Requests one API process serves from the database at once; the others "
        "wait their turn without holding a thread. At most 14: one fewer than the database "
        "connections a process keeps (db.engine's POOL_SIZE + POOL_OVERFLOW).",
    )
    # The server's limits (docs/api.md, "Limits"): what one client can hold or cost.
    api_header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="A connection whose request head (request line and headers) is not complete "
        "this long after it opened, or after the head's first byte, is closed, in s.",
    )
    api_body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="A request body not complete this long after its head is refused (408) and "
        "its connection closed, in s.",
    )
    api_max_body_bytes: int = Field(
        default=64 * 1024,
        gt=0,
        description="Largest request body of a route other than POST /specs (which takes "
        "max_spec_bytes), in bytes; a read takes none.",
    )
    api_keep_alive_s: int = Field(
        default=5, ge=1, description="An idle kept-alive connection is closed after this, in s."
    )
    api_max_connections: int = Field(
        default=4096,
        ge=16,
        description="Open connections one API process keeps (fewer where RLIMIT_NOFILE is low); "
        "beyond it a new one first closes the oldest still waiting for its request head, else "
        "it is closed itself.",
    )
    api_event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        default="auto",
        description="The server's event loop: uvloop (libuv, in C) where it is installed (auto; "
        "a dependency on Linux and macOS), else asyncio's own. Under 20,000 connections sending "
        "their heads slowly, /health's p95 was 24-76 ms with uvloop and 130-470 ms with asyncio "
        '(docs/api.md, "Limits").',
    )
    api_max_requests: int = Field(
        default=256,
        ge=1,
        description="Requests one API process serves at once; beyond it a 503 problem document.",
    )
    api_rate_per_s: float = Field(
        default=10.0,
        ge=0,
        description="Expensive reads (estimates, rooflines, comparisons, model pages) one client "
        "address may make per s, on average; beyond it a 429 with Retry-After. 0: no limit.",
    )
    api_rate_burst: int = Field(
        default=120, ge=1, description="Expensive reads a client may make at once (its bucket)."
    )
    api_client_share: float = Field(
        default=1.0,
        ge=0,
        description="Server-seconds a second one client (its token, else its address) may use "
        "on average, each request charged the time it took; beyond it a 429 with Retry-After. "
        "1: all one client asking one request at a time can use. 0: no limit.",
    )
    api_client_burst_s: float = Field(
        default=60.0, gt=0, description="Server-seconds a client may use at once (its bucket)."
    )
    api_allowed_hosts: list[str] = Field(
        default_factory=lambda: ["*"],
        description="Hosts the API answers to (its requests' Host header): names, '*.domain' "
        "or '*' (any); others get a 400. `opdb serve` on a loopback address answers to "
        "localhost, 127.0.0.1 and ::1 only where this is not set.",
    )
    api_forwarded_allow_ips: list[str] = Field(
        default_factory=list,
        description='Proxies (addresses or networks, e.g. ["10.0.0.1"]) whose X-Forwarded-For '
        "and X-Forwarded-Proto are believed; none by default (the peer's address is the "
        "client's). Also `opdb serve --forwarded-allow-ips`.",
    )
    measure: MeasureSettings = Field(
        default_factory=MeasureSettings,
        description="The measurement method's tunables: OPDB_MEASURE__<FIELD>, e.g. __TRIALS=2.",
    )

    @model_validator(mode="after")
    def _database_password_from_file(self) -> Settings:
        """Put the password of database_password_file into database_url (its only reader)."""
        path = self.database_password_file
        if path is None:
            return self
        from urllib.parse import quote

        scheme, sep, rest = self.database_url.partition("://")
        authority = rest.split("/", 1)[0]
        if not sep or "@" not in authority:
            raise ValueError(
                "OPDB_DATABASE_PASSWORD_FILE needs a database URL that names its user "
                "(postgresql+psycopg://USER@HOST:PORT/DATABASE)"
            )
        user, _, host = rest.partition("@")
        if ":" in user:
            raise ValueError(
                "OPDB_DATABASE_URL holds a password and OPDB_DATABASE_PASSWORD_FILE names one: "
                "give it in one place"
            )
        password = password_from(path, None, "OPDB_DATABASE_PASSWORD_FILE")
        # The URL as written, the password added (quoted: a URL's reserved characters allowed).
        self.database_url = f"{scheme}://{user}:{quote(str(password), safe='')}@{host}"
        return self

    @model_validator(mode="after")
    def _api_token_from_file(self) -> Settings:
        """Read api_token from api_token_file, where one is named (its only reader)."""
        path = self.api_token_file
        if path is None:
            return self
        if self.api_token is not None:
            raise ValueError("set OPDB_API_TOKEN or OPDB_API_TOKEN_FILE, not both")
        try:
            token = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"OPDB_API_TOKEN_FILE {path} cannot be read: {exc}") from None
        if not token:
            raise ValueError(f"OPDB_API_TOKEN_FILE {path} is empty")
        self.api_token = SecretStr(token)
        return self

    @field_validator("api_public_origin")
    @classmethod
    def _an_origin(cls, value: str | None) -> str | None:
        """Take ``scheme://host[:port]`` alone (http or https), without a trailing slash."""
        if value is None or not value.strip():
            return None
        parts = urlsplit(value.strip())
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.username is not None
            or parts.path not in ("", "/")
            or parts.query
            or parts.fragment
        ):
            raise ValueError(
                f"OPDB_API_PUBLIC_ORIGIN {value!r} is not an origin: http(s)://host[:port], "
                "nothing after it"
            )
        return f"{parts.scheme}://{parts.netloc.lower()}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Return the process-wide settings, read once on first call.

    Raises:
        ConfigurationError: a variable's value is not one its setting takes (one line naming
            the variable and why).
    """
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        if not first["loc"]:  # a rule between settings: its message names them
            raise ConfigurationError(message) from None
        where = ENV_PREFIX + "__".join(str(part) for part in first["loc"]).upper()
        given = f" (given {first['input']!r})" if isinstance(first.get("input"), str) else ""
        raise ConfigurationError(f"{where}: {message}{given}") from None
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


FAST_FAKE_MEASURE: dict[str, str] = {
    "OPDB_DEVICE": "fake",
    "OPDB_FAKE_UPDATE_PERIOD_S": "0.001",
    "OPDB_MEASURE__WARMUP_S": "0",
    "OPDB_MEASURE__WARMUP_MIN_CALLS": "1",
    "OPDB_MEASURE__BLOCK_MIN_S": "0.0002",
    "OPDB_MEASURE__BLOCKS": "3",
    "OPDB_MEASURE__MODEL_MIN_TIME_S": "0",
    "OPDB_MEASURE__RETRIES_WHEN_UNSTABLE": "0",
    "OPDB_MEASURE__ENERGY_WINDOWS": "timed",
    "OPDB_MEASURE__ENERGY_WINDOW_S": "0.005",
    "OPDB_MEASURE__ENERGY_WARMUP_S": "0",
    "OPDB_MEASURE__ENERGY_WINDOW_MIN_CALLS": "2",
    # a window of 10 counter periods (10 ms), not 50: an LLM's three interleaved jobs spent 9.6
    # of their 15 s in energy windows
    "OPDB_MEASURE__ENERGY_WINDOW_MIN_PERIODS": "10",
    "OPDB_MEASURE__TRIALS": "1",
    "OPDB_MEASURE__MAX_GAP_S": "0",
    "OPDB_MEASURE__IDLE_WINDOW_S": "0.005",
    "OPDB_MEASURE__COOLDOWN_S": "0",
    # not measured until tight: up to tight_budget_s (60 s) a job on a loaded host; the demo's
    # test took 57 s alone with it, 41 s without
    "OPDB_MEASURE__TIGHT_RATIO": "0",
    # `opdb peaks` on the fake device: 1.5 s instead of 6.3 s
    "OPDB_MEASURE__PEAK_MIN_TIME_S": "0.05",
}
"""Environment that runs the real measurement method in milliseconds on the fake device: for the
tests and the benchmarks' setup, whose measured figures do not matter (never for real figures)."""
