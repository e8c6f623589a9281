"""Shared building blocks: the strict base model, bounded string, number, id and JSON types.

Every request value is bounded at the edge, before a transaction opens: strings by length and by
character class (no NUL or other control characters, which PostgreSQL cannot store or which break
a page), numbers by strict JSON type (``"123"`` and ``true`` are not numbers), ids by the database's
integer range, times by the range a database can store, and free-form JSON objects by depth, size
and content (finite numbers only).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime
from typing import Annotated, Any, TypeVar

import numpy as np
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
)

# The databases' INTEGER primary keys (PostgreSQL int4): larger ids cannot exist, and binding one
# fails in the driver, so they are refused at the edge.
MAX_DB_ID = 2**31 - 1

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Free text may hold tabs and line breaks, never NUL or the other C0 controls.
_TEXT_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _control_message(value: str, match: re.Match[str]) -> str:
    return f"must not contain control characters (U+{ord(match.group()):04X} at position {match.start()})"


def no_control_characters(value: str) -> str:
    """A one-line value (name, key, unit): no control character at all."""
    if match := _CONTROL.search(value):
        raise ValueError(_control_message(value, match))
    return value


def no_nul(value: str) -> str:
    """Free text: tabs and line breaks are fine; NUL and other control characters are not."""
    if match := _TEXT_CONTROL.search(value):
        raise ValueError(_control_message(value, match))
    return value


# A single line (names, keys, units, refs) and free text; combine with StringConstraints for length.
Line = Annotated[str, AfterValidator(no_control_characters)]
Text = Annotated[str, AfterValidator(no_nul)]

# Bounds mirror the column sizes in backend/db/models.py so nothing is truncated by the database.
Name = Annotated[Line, StringConstraints(min_length=1, max_length=200)]
ShortText = Annotated[Line, StringConstraints(max_length=64)]
LongText = Annotated[Text, StringConstraints(max_length=10_000)]
MetricName = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:/\-]+$")]
Unit = Annotated[Line, StringConstraints(min_length=1, max_length=32)]
Key = Annotated[Line, StringConstraints(min_length=1, max_length=200)]

# Strict JSON numbers: no strings, no booleans. A float field still takes an integer (``5`` is 5.0).
Int = Annotated[int, Field(strict=True)]
Float = Annotated[float, Field(strict=True)]


def parse_db_id(text: str) -> int | None:
    """A row id as a URL writes it: ASCII digits only (no sign, no ``_``, no digits of another
    script, which ``int()`` takes: Arabic-Indic "10" is 10), 1 to :data:`MAX_DB_ID`, surrounding spaces
    allowed. None for anything else, so that every caller refuses it with its own message."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_DB_ID)):
        return None
    value = int(text)
    return value if 1 <= value <= MAX_DB_ID else None


ID_RULE = f"an integer from 1 to {MAX_DB_ID} in ASCII digits"


def ids_in_range(text: str) -> str:
    """Comma-separated ids (``"3,4,5"``): each that is digits must be a possible row id. The
    services refuse anything else with their own message; this only keeps huge numbers from the driver."""
    for part in text.split(","):
        part = part.strip()
        if part.isdigit() and parse_db_id(part) is None:
            raise ValueError(f"each id is {ID_RULE}, got {part[:20]!r}")
    return text


def _ascii_id(value: object) -> object:
    # pydantic's int parsing of text takes "+1" and "1_0"; a URL's id is ASCII digits only.
    if isinstance(value, str) and not (value.strip().isascii() and value.strip().isdigit()):
        raise ValueError(f"expected {ID_RULE}, got {value[:20]!r}")
    return value


# A row id as a request names it (path, query, body).
# The bounds first: after a BeforeValidator, pydantic writes them into the JSON schema as "ge"/"le",
# which no client reads (the OpenAPI document then allowed 0 and ids past the bound).
DbId = Annotated[int, Field(ge=1, le=MAX_DB_ID), BeforeValidator(_ascii_id)]

# A query value holding run ids or a study id as text, e.g. ``baseline_runs=3,4,5``.
IdText = Annotated[str, AfterValidator(ids_in_range)]
# The longest id list a URL carries (about 1,000 ids); request lines past ABLATE_MAX_URL_BYTES are
# refused by the HTTP server itself (414, backend/server.py), before the app sees them.
MAX_ID_LIST = 8_000

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _calendar_date(value: object) -> object:
    # pydantic takes 0 or an epoch at midnight for a date (1970-01-01): a date is written YYYY-MM-DD.
    if (
        isinstance(value, datetime)
        or not isinstance(value, date | str)
        or (isinstance(value, str) and not _ISO_DATE.fullmatch(value))
    ):
        raise ValueError(f"expected a date as YYYY-MM-DD, got {str(value)[:40]!r}")
    return value


# A calendar day (release dates): a date, or its ISO text; never a number.
IsoDate = Annotated[date, BeforeValidator(_calendar_date)]

_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
_LATEST = datetime(9999, 12, 31, tzinfo=UTC)


def _storable_time(value: datetime) -> datetime:
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        raise ValueError("out of range: the time in UTC falls outside years 1970 to 9999") from None
    if not _EARLIEST <= utc < _LATEST:
        raise ValueError("out of range: the time in UTC falls outside years 1970 to 9999")
    return value


# RFC 3339 with a time zone, within what every database stores (``0001-01-01T00:00:00+14:00`` is not).
Timestamp = Annotated[AwareDatetime, AfterValidator(_storable_time)]


def _scalar_tag(value: Any) -> str:
    if isinstance(value, bool):
        return "flag"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else "text"


# A provenance value: text, number, flag or null. Tagged so an error names one reason, not four.
Scalar = Annotated[
    Annotated[Text, StringConstraints(max_length=2_000), Tag("text")]
    | Annotated[Float, Tag("number")]
    | Annotated[bool, Tag("flag")]
    | Annotated[None, Tag("null")],
    Discriminator(_scalar_tag),
]
# A release reference such as ``training-nv-pytorch:25.12``.
ReleaseRef = Annotated[
    Line, StringConstraints(min_length=3, max_length=265, pattern=r"^[^\s:]+(:[^\s:/]+)?:[^\s:/]+$")
]

# Free-form JSON (manifests, runner options, driver requirements, release notes' rules): any shape,
# bounded in depth, size and content, so whatever is stored can be read back and rendered.
MAX_JSON_DEPTH = 32
MAX_JSON_NODES = 10_000
MAX_JSON_TEXT = 10_000
MAX_JSON_INT = 2**63 - 1


def bounded_json(value: Any) -> Any:
    """Refuse nesting deeper than MAX_JSON_DEPTH, more than MAX_JSON_NODES values, long or
    control-character strings and keys, non-finite or 64-bit-overflowing numbers, non-JSON types."""
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    nodes = 0
    while stack:  # iterative: a hostile depth must not exhaust the interpreter's stack
        item, where, depth = stack.pop()
        nodes += 1
        at = f" at {where}" if where else ""
        if nodes > MAX_JSON_NODES:
            raise ValueError(f"more than {MAX_JSON_NODES} values in one object")
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels{at}")
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str) or not key or len(key) > 200:
                    raise ValueError(f"keys must be 1 to 200 characters{at}")
                if match := _CONTROL.search(key):
                    raise ValueError(f"key {key[:40]!r}{at} {_control_message(key, match)}")
                if isinstance(child, np.ndarray):  # numbers the results parser packed: a list again
                    child = item[key] = child.tolist()
                stack.append((child, f"{where}.{key}" if where else key, depth + 1))
        elif isinstance(item, list):
            for i, child in enumerate(item):
                if isinstance(child, np.ndarray):
                    child = item[i] = child.tolist()
                stack.append((child, f"{where}[{i}]", depth + 1))
        elif isinstance(item, str):
            if len(item) > MAX_JSON_TEXT:
                raise ValueError(f"text longer than {MAX_JSON_TEXT} characters{at}")
            if match := _TEXT_CONTROL.search(item):
                raise ValueError(f"text{at} {_control_message(item, match)}")
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if abs(item) > MAX_JSON_INT:
                raise ValueError(f"integer{at} does not fit in 64 bits")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError(f"number{at} must be finite (no NaN, no infinity, nothing beyond 1.8e308)")
        else:
            raise ValueError(f"not a JSON value{at}: {type(item).__name__}")
    return value


FreeDict = Annotated[dict[Key, Any], Field(max_length=500), AfterValidator(bounded_json)]

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
    Annotated[Line, StringConstraints(min_length=1, max_length=265), Tag(BY_NAME)]
    | Annotated[Definition, Tag(IN_FULL)],
    Discriminator(_name_or_full),
]


class Strict(BaseModel):
    """Requests: unknown fields refused (a typo must not vanish), NaN and infinity refused."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, str_max_length=100_000)


class Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)
