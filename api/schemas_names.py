"""Names a request may create (a device kind's): the library's rule as a schema type."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from operator_db.db.queries.devices import MAX_KIND_NAME, check_device_kind_name, kind_name_pattern
from operator_db.errors import InvalidInputError


def _kind_name(name: str) -> str:
    """Apply ``check_device_kind_name``; its one-line message is the 422's detail."""
    try:
        return check_device_kind_name(name)
    except InvalidInputError as exc:
        raise PydanticCustomError("device_kind_name", str(exc)) from None


KindName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_KIND_NAME,
        # In the schema only: pydantic's own pattern error would quote the whole pattern.
        json_schema_extra={"pattern": kind_name_pattern()},
    ),
    AfterValidator(_kind_name),
]
"""A new device kind's name: printable characters, no ``/``, no space at either end, at most
200 characters (``operator_db.db.queries.devices.check_device_kind_name``)."""
