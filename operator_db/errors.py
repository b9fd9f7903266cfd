"""One exception hierarchy for operator-db; the CLI and the API map it to exit codes and HTTP."""

from __future__ import annotations


class OperatorDBError(Exception):
    """Root of every error operator-db raises on purpose; its message is one line for a user."""

    retryable: bool = False
    """Whether trying again may succeed (a device or database hiccup), as opposed to bad input."""


class ConfigurationError(OperatorDBError):
    """A setting is missing or invalid."""


class InvalidInputError(OperatorDBError):
    """A value given by a user is malformed or out of bounds (an empty or overlong name, ...)."""


class SpecError(InvalidInputError):
    """A YAML spec is malformed or invalid; the message names the file and the path inside it."""

    def __init__(self, source: str, path: str, message: str) -> None:
        self.source = source
        self.path = path
        self.detail = message
        where = f"{source}: {path}: " if path else f"{source}: "
        super().__init__(f"{where}{message}")


class NotFoundError(OperatorDBError):
    """A model, configuration, device kind or job does not exist, or a plot has nothing to draw."""


class ConflictError(OperatorDBError):
    """The request contradicts what is already stored."""


class DatabaseError(OperatorDBError):
    """The database cannot be reached or is not at the schema revision this code expects."""

    retryable = True


class ConnectionLostError(DatabaseError):
    """The database ended a connection while it was in use.

    A restart, ``pg_terminate_backend``, a failover: the work is not done, and a new connection
    may well succeed.
    """


class SchemaMismatchError(DatabaseError):
    """The database answers, at a schema revision this code cannot use.

    Behind, newer or at several revisions: waiting does not change that, an admin does (``opdb db
    upgrade``).
    """

    retryable = False


class DiskFullError(DatabaseError):
    """The database's disk is full (SQLite's SQLITE_FULL, PostgreSQL's SQLSTATE 53100).

    The transaction that met it was rolled back, so nothing of it was written; reads still work,
    and a write succeeds again once space is freed.
    """


class DeviceError(OperatorDBError):
    """A device refused or failed an operation."""

    retryable = True


class DeviceUnsupportedError(DeviceError):
    """The device (or its driver) does not support the asked-for feature."""


class DeviceContextLostError(DeviceError):
    """The device's context is unusable (a sticky CUDA error): only a new process can use it.

    The worker that meets one hands its job back and stops; ``opdb`` then exits with its own code
    (``EXIT_RESTART`` in cli/main.py) so that a supervisor starts a fresh process.
    """


class PermissionDeniedError(OperatorDBError):
    """The caller may not do this (a token without the right, an unreadable counter, ...)."""


class AuthenticationError(PermissionDeniedError):
    """The caller did not say who it is, or its credentials are not valid (no or a bad token)."""


class TooLargeError(OperatorDBError):
    """An input is over a size limit (a request body, a file)."""


class HarvestError(OperatorDBError):
    """A model could not be built, run or described."""


class MeasurementError(OperatorDBError):
    """A measurement could not be taken."""

    retryable = True
