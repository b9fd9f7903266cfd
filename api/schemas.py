"""HTTP request and response bodies of the REST API."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class ErrorBody(BaseModel):
    """Every error response: one line for a person, a kind for a program."""

    error: str = Field(description="The error class, e.g. SpecError, NotFoundError.")
    detail: str = Field(description="One line saying what is wrong.")


class Health(BaseModel):
    """Whether the service can reach its database and at which schema revision it is."""

    status: Literal["ok"]
    database: str
    revision: str | None
    version: str


class IngestedSpec(BaseModel):
    """What storing one uploaded spec did."""

    source: str
    model: str
    status: Literal["new", "unchanged", "replaced"]
    operators: int
    new_configs: int
    known_configs: int
    disagreeing_configs: int


class ModelSummaryOut(BaseModel):
    """A model with its totals per forward (or training step)."""

    name: str
    reference: str | None
    mode: str
    batch_size: int | None
    configs: int
    calls: int
    flops: int = Field(description="Σ count × forward FLOPs, in FLOPs.")
    params: int = Field(description="Σ count × parameters, in elements.")


class OperatorOut(BaseModel):
    """One configuration of a model, with the model's count and locations."""

    key: str
    op: str
    kind: str
    inputs: list[dict[str, Any]]
    count: int
    flops: int | None = Field(description="Forward FLOPs per call.")
    bytes: int | None = Field(description="Compulsory bytes per call.")
    params: int
    locations: list[str]


class ModelDetail(ModelSummaryOut):
    """A model and its operator configurations in spec order."""

    inputs: list[dict[str, Any]]
    dtype: str
    spec_hash: str
    operators: list[OperatorOut]
