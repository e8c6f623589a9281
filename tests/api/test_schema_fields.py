"""The response schemas that serve a lower layer's dataclass list its fields themselves (so that mypy
and a reader see them); these tests keep each list one decision: they fail as soon as a schema and
its dataclass differ in a field's name, type, order or being required."""

from __future__ import annotations

import dataclasses
from typing import Any, get_type_hints

import pytest
from pydantic import BaseModel

from ablate.backend.analysis.checkpointing import KPrediction
from ablate.backend.domain.catalog import ReleaseHead, WorkloadInfo
from ablate.backend.schemas.advice import KRowOut
from ablate.backend.schemas.catalog import ReleaseOut, WorkloadOut

# (schema, dataclass, the schema's fields before the dataclass's, the dataclass's fields it omits)
CASES: list[tuple[type[BaseModel], type[Any], tuple[str, ...], tuple[str, ...]]] = [
    (ReleaseOut, ReleaseHead, (), ()),
    (WorkloadOut, WorkloadInfo, ("id",), ()),
    # KRowOut lists the measurements under the API's names (measured_peak_memory_gib, ...).
    (KRowOut, KPrediction, (), ("measured_peak_gib", "measured_step_time_s")),
]


def _expected(source: type[Any], omit: tuple[str, ...]) -> list[tuple[str, Any, bool]]:
    """The dataclass's fields but ``omit``: name, type and whether it is required."""
    hints = get_type_hints(source)
    return [
        (f.name, hints[f.name], f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in dataclasses.fields(source)
        if f.name not in omit
    ]


def _listed(schema: type[BaseModel], before: tuple[str, ...], count: int) -> list[tuple[str, Any, bool]]:
    """The schema's ``count`` fields after ``before``: name, type and whether it is required."""
    names = list(schema.model_fields)
    assert tuple(names[: len(before)]) == before
    return [
        (n, schema.model_fields[n].annotation, schema.model_fields[n].is_required())
        for n in names[len(before) : len(before) + count]
    ]


@pytest.mark.parametrize(("schema", "source", "before", "omit"), CASES, ids=[c[0].__name__ for c in CASES])
def test_schema_lists_the_dataclass_fields_in_order(
    schema: type[BaseModel], source: type[Any], before: tuple[str, ...], omit: tuple[str, ...]
) -> None:
    expected = _expected(source, omit)
    assert _listed(schema, before, len(expected)) == expected, (
        f"{schema.__name__} no longer lists {source.__name__}'s fields"
    )


def test_a_drifted_field_is_caught() -> None:
    """The check itself: a field added to the dataclass, or a type changed, fails it."""

    @dataclasses.dataclass(frozen=True)
    class Longer(ReleaseHead):
        digest: str

    @dataclasses.dataclass(frozen=True)
    class Retyped(ReleaseHead):
        platform: int  # type: ignore[assignment]

    for source in (Longer, Retyped):
        expected = _expected(source, ())
        assert _listed(ReleaseOut, (), len(expected)) != expected
