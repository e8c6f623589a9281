"""Shared building blocks: the strict base model and bounded string types."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StringConstraints, Tag

# Bounds mirror the column sizes in backend/db/models.py so nothing is truncated by the database.
Name = Annotated[str, StringConstraints(min_length=1, max_length=200)]
ShortText = Annotated[str, StringConstraints(max_length=64)]
LongText = Annotated[str, StringConstraints(max_length=10_000)]
MetricName = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:/\-]+$")]
Unit = Annotated[str, StringConstraints(min_length=1, max_length=32)]
Key = Annotated[str, StringConstraints(min_length=1, max_length=200)]


def _scalar_tag(value: Any) -> str:
    if isinstance(value, bool):
        return "flag"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else "text"


# A provenance value: text, number, flag or null. Tagged so an error names one reason, not four.
Scalar = Annotated[
    Annotated[str, Tag("text"), StringConstraints(max_length=2_000)]
    | Annotated[float, Tag("number")]
    | Annotated[bool, Tag("flag")]
    | Annotated[None, Tag("null")],
    Discriminator(_scalar_tag),
]
# A release reference such as ``training-nv-pytorch:25.12``.
ReleaseRef = Annotated[
    str, StringConstraints(min_length=3, max_length=265, pattern=r"^[^\s:]+(:[^\s:/]+)?:[^\s:/]+$")
]
# JSON objects whose content is free (manifests, runner options): bounded in entries, not shape.
FreeDict = Annotated[dict[Key, Any], Field(max_length=500)]

# Tags of the "name or full definition" unions. They are dropped from error locations so a client
# reads ``results[0].cluster.nodes``, not ``results[0].cluster.in-full.nodes``.
BY_NAME = "by-name"
IN_FULL = "in-full"
UNION_TAGS = frozenset({BY_NAME, IN_FULL, "number", "with-unit", "text", "flag", "null"})


def _name_or_full(value: Any) -> str:
    return BY_NAME if isinstance(value, str) else IN_FULL


Definition = TypeVar("Definition", bound=BaseModel)
# ``Name | definition``: a string refers to a stored entry, an object defines (or re-states) one.
NameOr = Annotated[
    Annotated[str, Tag(BY_NAME), StringConstraints(min_length=1, max_length=265)]
    | Annotated[Definition, Tag(IN_FULL)],
    Discriminator(_name_or_full),
]


class Strict(BaseModel):
    """Requests: unknown fields refused (a typo must not vanish), NaN and infinity refused."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, str_max_length=100_000)


class Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)
