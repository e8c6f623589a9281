"""What one side of a comparison is: a release, a study, or a list of run ids; one definition for
``GET /api/v1/compare`` and the dashboard's ``/compare`` page.

A side is given exactly one way. :func:`parse_side` turns the query of one side into a typed
:data:`CompareSide` with its label (the same on the API and the page), :func:`side_run_ids`
resolves it to run ids, and :func:`compare_sides` compares two: two releases give the full release
comparison of the contender against the baseline, anything else compares the two sets of runs.
Every refusal is a :class:`ValidationProblem` or :class:`NotFound` naming the query parameter at
fault, which the API answers as problem+json and the dashboard as an error page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.orm import Session

from ablate.backend.schemas.common import ID_RULE, parse_db_id
from ablate.backend.services import catalog
from ablate.backend.services.comparison import (
    ComparisonOptions,
    ReleaseComparison,
    RunSetComparison,
    build_release_comparison,
    compare_run_sets,
    parse_run_ids,
    release_run_ids,
    study_run_ids,
)
from ablate.backend.services.errors import ValidationProblem

Role = Literal["baseline", "contender"]
ROLES: tuple[Role, Role] = ("baseline", "contender")


@dataclass(frozen=True)
class SideFields:
    """The query parameters one side is given by (errors name them)."""

    release: str
    runs: str
    study: str

    def names(self) -> str:
        return f"{self.release}, {self.runs} or {self.study}"


# The API names a release side after its role; the page keeps its short, shareable ``a`` and ``b``.
API_FIELDS: dict[Role, SideFields] = {
    role: SideFields(role, f"{role}_runs", f"{role}_study") for role in ROLES
}
PAGE_FIELDS: dict[Role, SideFields] = {
    "baseline": SideFields("a", "baseline_runs", "baseline_study"),
    "contender": SideFields("b", "contender_runs", "contender_study"),
}


@dataclass(frozen=True)
class ReleaseSide:
    """Every run of one release."""

    ref: str
    field: str  # the query parameter it came from

    @property
    def label(self) -> str:
        return self.ref


@dataclass(frozen=True)
class StudySide:
    """Every run of one study."""

    study_id: int
    field: str

    @property
    def label(self) -> str:
        return f"study #{self.study_id}"


@dataclass(frozen=True)
class RunsSide:
    """Hand-picked runs (sorted, without repeats)."""

    run_ids: tuple[int, ...]
    field: str

    @property
    def label(self) -> str:
        n = len(self.run_ids)
        return f"{n} run{'s' if n != 1 else ''}"


CompareSide = ReleaseSide | StudySide | RunsSide


def _given(value: str | int | None) -> bool:
    return value is not None and (not isinstance(value, str) or bool(value.strip()))


def any_given(*values: str | int | None) -> bool:
    """Whether the query says anything about any side (the page shows its form when it does not)."""
    return any(_given(v) for v in values)


def _study_id(value: str | int, field: str) -> int:
    study_id = parse_db_id(str(value))
    if study_id is None:
        raise ValidationProblem.at(field, f"expected a study id ({ID_RULE}), got {str(value).strip()[:20]!r}")
    return study_id


def parse_side(
    role: Role,
    fields: SideFields,
    *,
    release: str | None = None,
    runs: str | None = None,
    study: str | int | None = None,
) -> CompareSide:
    """The side ``role`` from its query values; empty values count as not given (an empty form field).

    Refused (422 at ``role``) unless exactly one of the three is given; a malformed run list or
    study id is refused at its own parameter. Nothing is looked up: see :func:`side_run_ids`.
    """
    given = [
        name
        for name, v in ((fields.release, release), (fields.runs, runs), (fields.study, study))
        if _given(v)
    ]
    if len(given) != 1:
        also = f" (got {', '.join(given)})" if given else ""
        raise ValidationProblem.at(role, f"give exactly one of {fields.names()}{also}")
    if _given(release):
        assert release is not None
        return ReleaseSide(release.strip(), fields.release)
    if _given(runs):
        assert runs is not None
        return RunsSide(tuple(parse_run_ids(runs.strip(), fields.runs)), fields.runs)
    assert study is not None
    return StudySide(_study_id(study, fields.study), fields.study)


def parse_sides(
    fields: Mapping[Role, SideFields], values: Mapping[str, str | int | None]
) -> tuple[CompareSide, CompareSide]:
    """Both sides from a query's ``values`` by parameter name, ``fields`` naming each side's
    parameters (the API's or the page's); the baseline is checked first."""

    def text(name: str) -> str | None:
        value = values.get(name)
        return None if value is None else str(value)

    baseline, contender = (
        parse_side(role, f, release=text(f.release), runs=text(f.runs), study=values.get(f.study))
        for role, f in ((role, fields[role]) for role in ROLES)
    )
    return baseline, contender


def side_run_ids(session: Session, side: CompareSide) -> list[int]:
    """The runs a side stands for; an unknown release or study is a 404 at the side's parameter.

    Unknown run ids are refused by :func:`compare_run_sets`, which loads them.
    """
    if isinstance(side, ReleaseSide):
        return release_run_ids(session, side.ref, side.field)
    if isinstance(side, StudySide):
        return study_run_ids(session, side.study_id, side.field)
    return list(side.run_ids)


def compare_sides(
    session: Session,
    baseline: CompareSide,
    contender: CompareSide,
    *,
    options: ComparisonOptions | None = None,
) -> ReleaseComparison | RunSetComparison:
    """Two releases: ``contender``'s release comparison against ``baseline``; else the two run sets."""
    if isinstance(baseline, ReleaseSide) and isinstance(contender, ReleaseSide):
        # Looked up here so that an unknown release is reported at its own parameter.
        old = catalog.get_release(session, baseline.ref, baseline.field)
        new = catalog.get_release(session, contender.ref, contender.field)
        if old.id == new.id:
            raise ValidationProblem.at(contender.field, "pick two different releases")
        return build_release_comparison(session, contender.ref, baseline_ref=baseline.ref, options=options)
    return compare_run_sets(
        session,
        side_run_ids(session, baseline),
        side_run_ids(session, contender),
        baseline_label=baseline.label,
        contender_label=contender.label,
        options=options,
    )
