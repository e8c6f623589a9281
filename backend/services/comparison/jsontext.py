"""Canonical JSON of comparison dataclasses: the same data gives the same bytes."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from datetime import date
from functools import lru_cache
from typing import Any

_SCALARS = (str, int, bool, type(None))


@lru_cache(maxsize=256)
def _field_names(cls: type) -> tuple[str, ...] | None:
    return tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None


def to_jsonable(obj: Any) -> Any:
    """Dataclasses (ours and the analysis ones) as plain JSON values, in field order.

    Dispatches on the exact type first: a large release serialises tens of thousands of values.
    """
    kind = type(obj)
    if kind is float:
        return obj if math.isfinite(obj) else None
    if kind in _SCALARS:
        return obj
    if kind is tuple or kind is list:
        return [to_jsonable(v) for v in obj]
    names = _field_names(kind)
    if names is not None:
        return {n: to_jsonable(getattr(obj, n)) for n in names}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, date):
        return obj.isoformat()
    if isinstance(obj, _SCALARS):
        return obj
    return str(obj)


def fields_of(obj: Any) -> dict[str, Any]:
    return {n: getattr(obj, n) for n in _field_names(type(obj)) or ()}


def _json_default(obj: Any) -> Any:
    """What the json encoder cannot write itself, one level at a time (it recurses into the result)."""
    if _field_names(type(obj)) is not None:
        return fields_of(obj)
    if isinstance(obj, Mapping):
        return {str(k): v for k, v in obj.items()}
    if isinstance(obj, date):
        return obj.isoformat()
    return str(obj)


def json_text(body: Mapping[str, Any], *, indent: int | None = None) -> str:
    """Canonical JSON text of a ``json_body()``: the same data gives the same bytes.

    Compact (``indent=None``, what the API answers): the stdlib's C encoder walks the dataclasses
    itself through ``default``, one Python call per dataclass rather than per value, about twice as
    fast as :func:`to_jsonable` first. Its text is that of ``to_jsonable(body)`` exactly; only when
    a non-finite float is present (never produced by the analysis, which maps NaN to None) does it
    fall back to that path, which writes such a float as null. Indented text goes through the
    pure-Python encoder either way, where converting first is the faster of the two.
    """
    if indent is not None:
        return json.dumps(to_jsonable(body), indent=indent, ensure_ascii=False, allow_nan=False) + "\n"
    kw: dict[str, Any] = {"separators": (",", ":"), "ensure_ascii": False, "allow_nan": False}
    try:
        return json.dumps(body, default=_json_default, **kw)
    except ValueError:
        return json.dumps(to_jsonable(body), **kw)
