"""The one JSON encoder of comparisons: canonical, byte-stable, the same for the API and the report."""

from __future__ import annotations

import json
import types
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property

import pytest

from ablate.backend.db.database import Database
from ablate.backend.reports.json import render_json
from ablate.backend.services import comparison as svc
from ablate.backend.services.comparison.jsontext import fields_of, json_bytes, json_text, to_jsonable
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
