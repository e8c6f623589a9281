"""Canonical JSON of comparison dataclasses: one encoder, so the same data gives the same bytes.

The encoder is pydantic-core's ``to_json`` (pydantic is a dependency already): it writes a
``json_body()`` straight to UTF-8 in Rust, dataclasses as their fields in definition order (what
``dataclasses.fields`` lists, nothing else of the instance), mappings in their order, tuples as
arrays, dates in ISO 8601, a non-finite float as ``null`` (the analysis never produces one: it
maps NaN to None), non-ASCII text as is. The API's compact answer and the indented report file
are this one encoder with two indents, and :func:`to_jsonable` (``to_json_dict()``) is its text
read back, so the three agree by construction rather than by keeping two encoders in step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import pydantic_core


@lru_cache(maxsize=256)
def _field_names(cls: type) -> tuple[str, ...] | None:
    return tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None


def fields_of(obj: Any) -> dict[str, Any]:
    """A dataclass's fields in order, values as they are (a ``json_body()`` starts from this)."""
    # Typed `type`, not type[Any]: mypy reads type[X]'s __hash__ as X's unbound one, not Hashable.
    cls: type = type(obj)
    return {n: getattr(obj, n) for n in _field_names(cls) or ()}


def _fallback(obj: Any) -> Any:
    # Only what pydantic-core does not write itself: a mapping that is not a dict, anything else as text.
    if isinstance(obj, Mapping):
        return dict(obj)
    return str(obj)


def json_bytes(body: Any, *, indent: int | None = None) -> bytes:
    """The canonical UTF-8 JSON of ``body``: compact (``indent=None``) or indented by ``indent``."""
    return pydantic_core.to_json(body, indent=indent, inf_nan_mode="null", fallback=_fallback)


def json_text(body: Mapping[str, Any], *, indent: int | None = None) -> str:
    """Canonical JSON text of a ``json_body()``; indented text ends with a newline (a file)."""
    text = json_bytes(body, indent=indent).decode()
    return text + "\n" if indent is not None else text


def to_jsonable(obj: Any) -> Any:
    """Plain JSON values (dicts, lists, str, numbers, None) of ``obj``: exactly what its text says."""
    return pydantic_core.from_json(json_bytes(obj))
