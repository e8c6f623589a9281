"""The one JSON encoder of comparisons: canonical, byte-stable, the same for the API and the report."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import struct
import types
import typing
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import cached_property
from typing import NamedTuple

import pytest

from ablate.backend.db.database import Database
from ablate.backend.reports.json import render_json
from ablate.backend.services import comparison as svc
from ablate.backend.services.comparison.jsontext import (
    fields_of,
    json_bytes,
    json_text,
    plain_dataclass,
    to_jsonable,
)
from tests.reports import seed

OPTS = svc.ComparisonOptions(n_resamples=499)


@dataclass(frozen=True)
class Inner:
    z: float | None
    a: tuple[int, ...]


@dataclass(frozen=True)
class Outer:
    name: str
    inner: Inner
    _private: int = 3
    when: date | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @cached_property
    def derived(self) -> int:  # stored in the instance's __dict__: must not leak into the JSON
        return 42


def test_dataclasses_are_their_fields_in_order_and_nothing_else() -> None:
    obj = Outer("Ünïcode →", Inner(float("nan"), (1, 2)), when=date(2026, 1, 2), extra={"b": 1, "a": 2})
    assert obj.derived == 42
    compact = json_text({"obj": obj, "inf": float("inf"), "proxy": types.MappingProxyType({"k": (0.5,)})})
    assert compact == (
        '{"obj":{"name":"Ünïcode →","inner":{"z":null,"a":[1,2]},"_private":3,"when":"2026-01-02",'
        '"extra":{"b":1,"a":2}},"inf":null,"proxy":{"k":[0.5]}}'
    )
    assert json_text({"obj": obj}) == json_text({"obj": obj})  # the same data, the same bytes
    indented = json_text({"obj": obj}, indent=2)
    assert indented.endswith("}\n") and indented.startswith('{\n  "obj": {\n    "name": "Ünïcode →",')
    assert json.loads(indented) == {"obj": json.loads(compact)["obj"]}
    assert to_jsonable(obj) == json.loads(json_bytes(obj)) and to_jsonable(float("nan")) is None
    assert list(fields_of(obj)) == ["name", "inner", "_private", "when", "extra"]


@pytest.fixture
def comparison(database: Database) -> svc.ReleaseComparison:
    seed.seed_standard(database)
    with database.read() as s:
        return svc.build_release_comparison(s, f"{seed.IMAGE}:25.12", options=OPTS)


def test_api_text_report_file_and_json_dict_say_the_same(comparison: svc.ReleaseComparison) -> None:
    compact = render_json(comparison, indent=None)
    indented = render_json(comparison)
    assert compact == render_json(comparison, indent=None) and indented == render_json(comparison)
    assert "\n" not in compact and indented.endswith("\n")
    assert json.loads(compact) == json.loads(indented) == comparison.to_json_dict()
    # Canonical: the body's own field order (dataclass order, then the derived summaries).
    assert list(json.loads(compact)) == [*fields_of(comparison), "verdict_counts", "suspects"]


def test_native_encoder_writes_the_reference_bytes(comparison: svc.ReleaseComparison) -> None:
    body = comparison.json_body()
    for indent in (None, 2):
        assert json_bytes(body, indent=indent, native=True) == json_bytes(body, indent=indent)
    # What orjson does not write itself, or refuses, comes out as pydantic-core writes it.
    odd = {
        "proxy": types.MappingProxyType({"k": (0.5,)}),
        "when": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        "day": date(2026, 1, 2),
        "pair": _Pair(1.5, "x"),
        "set": frozenset({3}),
        "nan": [float("nan"), float("-inf")],
        "text": "".join(chr(i) for i in range(0x30)) + '\u2028\ud7ff\U0001f600"\\/',
    }
    for indent in (None, 2):
        assert json_bytes(odd, indent=indent, native=True) == json_bytes(odd, indent=indent)
    for refused in ({"big": 2**70}, {1: "a non-text key"}):
        assert json_bytes(refused, native=True) == json_bytes(refused)
    assert json_bytes(Outer("n", Inner(1.0, ())), native=True) != json_bytes(Outer("n", Inner(1.0, ())))
    assert not plain_dataclass(Outer) and plain_dataclass(Inner)


class _Pair(NamedTuple):
    x: float
    name: str


def test_native_encoder_floats_match_the_reference() -> None:
    rng = random.Random(29)
    specials = [
        0.0,
        -0.0,
        0.1,
        1e15,
        1e16,
        1e17,
        1e21,
        1e22,
        1e-5,
        1e-6,
        1e-7,
        5e-324,
        1.7976931348623157e308,
    ]
    bits = (struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(50_000))
    values = (
        specials + [v for v in bits if math.isfinite(v)] + [10 ** rng.uniform(-30, 30) for _ in range(20_000)]
    )
    assert json_bytes(values, native=True) == json_bytes(values)


def _dataclasses_in(tp: object, seen: set[type]) -> None:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp in seen:
            return
        seen.add(tp)
        for hint in typing.get_type_hints(tp).values():
            _dataclasses_in(hint, seen)
    for arg in typing.get_args(tp):
        _dataclasses_in(arg, seen)


def test_release_comparison_holds_plain_dataclasses_only() -> None:
    # A release comparison's JSON is written by orjson (json_bytes native=True): every dataclass it
    # can hold must be written by it as pydantic-core writes it.
    seen: set[type] = set()
    _dataclasses_in(svc.ReleaseComparison, seen)
    assert len(seen) > 10
    assert [t.__name__ for t in seen if not plain_dataclass(t)] == []
