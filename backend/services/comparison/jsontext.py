"""Canonical JSON of comparison dataclasses: one encoder, so the same data gives the same bytes.

The encoder is pydantic-core's ``to_json`` (pydantic is a dependency already): it writes a
``json_body()`` straight to UTF-8 in Rust, dataclasses as their fields in definition order (what
``dataclasses.fields`` lists, nothing else of the instance), mappings in their order, tuples as
arrays, dates in ISO 8601, a non-finite float as ``null`` (the analysis never produces one: it
maps NaN to None), non-ASCII text as is. The API's compact answer and the indented report file
are this one encoder with two indents, and :func:`to_jsonable` (``to_json_dict()``) is its text
read back, so the three agree by construction rather than by keeping two encoders in step.

One shortcut, for bodies whose dataclasses are all *plain* (:func:`plain_dataclass`: no field named
with an underscore, no ``cached_property``, no ``__slots__``): orjson writes them (``native=True``),
about 4x faster at 10,000 cells. orjson writes a plain dataclass as its fields in order, floats in
the same shortest form and text with the same escapes as pydantic-core (tests/services/test_jsontext.py
checks both encoders on every float class and the comparison types); whatever orjson does not
write itself (dates, sets, named tuples, mappings that are not dicts) goes through pydantic-core's
own conversion, and a body orjson refuses (integers past 64 bits, keys that are not text) is written
by pydantic-core whole. The comparison types declare that they hold plain dataclasses only, and a
test walks their field types to keep it so.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import orjson
import pydantic_core


@functools.lru_cache(maxsize=256)
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


def _jsonable(obj: Any) -> Any:
    # What orjson does not write itself, as pydantic-core would write it.
    return pydantic_core.to_jsonable_python(obj, inf_nan_mode="null", fallback=_fallback)


_NATIVE_OPTIONS = {
    None: orjson.OPT_PASSTHROUGH_DATETIME,
    2: orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_INDENT_2,
}


def plain_dataclass(cls: type) -> bool:
    """Whether orjson writes instances of dataclass ``cls`` as pydantic-core does (its fields in order,
    nothing else): orjson leaves out fields named with an underscore and writes what a
    ``cached_property`` stored in the instance."""
    names = [f.name for f in dataclasses.fields(cls)]
    cached = any(isinstance(v, functools.cached_property) for k in cls.__mro__ for v in vars(k).values())
    return not cached and not hasattr(cls, "__slots__") and not any(n.startswith("_") for n in names)


def json_bytes(body: Any, *, indent: int | None = None, native: bool = False) -> bytes:
    """The canonical UTF-8 JSON of ``body``: compact (``indent=None``) or indented by ``indent``.
    ``native``: every dataclass in ``body`` is a :func:`plain_dataclass` (module doc)."""
    if native and indent in _NATIVE_OPTIONS:
        try:
            return orjson.dumps(body, default=_jsonable, option=_NATIVE_OPTIONS[indent])
        except orjson.JSONEncodeError:
            pass  # what orjson refuses (integers past 64 bits, keys that are not text): pydantic-core's
    return pydantic_core.to_json(body, indent=indent, inf_nan_mode="null", fallback=_fallback)


def json_text(body: Mapping[str, Any], *, indent: int | None = None, native: bool = False) -> str:
    """Canonical JSON text of a ``json_body()``; indented text ends with a newline (a file)."""
    text = json_bytes(body, indent=indent, native=native).decode()
    return text + "\n" if indent is not None else text


def to_jsonable(obj: Any) -> Any:
    """Plain JSON values (dicts, lists, str, numbers, None) of ``obj``: exactly what its text says."""
    return pydantic_core.from_json(json_bytes(obj))
