"""One definition of a compare side (a release, a study, run ids) for the API and the dashboard."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from ablate.backend.db.database import Database
from ablate.backend.db.models import Release, Run
from ablate.backend.schemas.common import ID_RULE
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import comparison as svc
from ablate.backend.services import studies
from ablate.backend.services.compare_sides import (
    API_FIELDS,
    PAGE_FIELDS,
    ReleaseSide,
    RunsSide,
    StudySide,
    any_given,
    compare_sides,
    parse_side,
    parse_sides,
    side_run_ids,
)
from ablate.backend.services.errors import NotFound, ProblemError, ValidationProblem
from tests.reports import seed
from tests.services.conftest import Catalog

OPTS = svc.ComparisonOptions(n_resamples=499)
OLD, NEW = f"{seed.IMAGE}:25.11", f"{seed.IMAGE}:25.12"


@pytest.fixture
def standard(database: Database) -> Database:
    seed.seed_standard(database)
    return database


def _release_runs(database: Database, ref: str) -> list[Run]:
    tag = ref.rpartition(":")[2]
    with database.read() as s:
        return list(s.scalars(select(Run).join(Release).where(Release.tag == tag).order_by(Run.id)))


def _field_error(exc: ProblemError) -> tuple[str, str]:
    (err,) = exc.errors
    return err.loc, err.msg


def test_a_side_is_typed_and_labelled_the_same_for_api_and_page() -> None:
    api, page = API_FIELDS["baseline"], PAGE_FIELDS["baseline"]
    assert parse_side("baseline", api, release=f" {NEW} ") == ReleaseSide(NEW, "baseline")
    assert parse_side("baseline", page, release=NEW, runs="", study="") == ReleaseSide(NEW, "a")
    runs = parse_side("baseline", page, runs="3, 1,2,3")
    assert runs == RunsSide((1, 2, 3), "baseline_runs") and runs.label == "3 runs"
    assert parse_side("contender", API_FIELDS["contender"], runs="7").label == "1 run"
    study_api = parse_side("contender", API_FIELDS["contender"], study=7)
    study_page = parse_side("contender", PAGE_FIELDS["contender"], study="7")
    assert study_api == study_page == StudySide(7, "contender_study") and study_api.label == "study #7"
    assert ReleaseSide(NEW, "b").label == NEW
    assert not any_given(None, "", "  ") and any_given("", 3)


@pytest.mark.parametrize(
    ("values", "loc", "msg"),
    [
        ({}, "baseline", "give exactly one of baseline, baseline_runs or baseline_study"),
        (
            {"release": NEW, "runs": "1"},
            "baseline",
            "give exactly one of baseline, baseline_runs or baseline_study (got baseline, baseline_runs)",
        ),
        ({"runs": "a,b"}, "baseline_runs", f"expected comma-separated run ids: 'a' is not {ID_RULE}"),
        ({"runs": "0,1"}, "baseline_runs", f"expected comma-separated run ids: '0' is not {ID_RULE}"),
        (
            {"runs": "1,\u0662"},
            "baseline_runs",
            f"expected comma-separated run ids: '\u0662' is not {ID_RULE}",
        ),
        ({"study": "x"}, "baseline_study", f"expected a study id ({ID_RULE}), got 'x'"),
        ({"study": 0}, "baseline_study", f"expected a study id ({ID_RULE}), got '0'"),
        ({"study": 2**31}, "baseline_study", f"expected a study id ({ID_RULE}), got '2147483648'"),
    ],
)
def test_a_malformed_side_is_refused_at_its_parameter(values: dict, loc: str, msg: str) -> None:
    with pytest.raises(ValidationProblem) as err:
        parse_side("baseline", API_FIELDS["baseline"], **values)
    assert _field_error(err.value) == (loc, msg)


def test_the_page_names_its_own_parameters() -> None:
    with pytest.raises(ValidationProblem) as err:
        parse_side("contender", PAGE_FIELDS["contender"])
    assert _field_error(err.value) == (
        "contender",
        "give exactly one of b, contender_runs or contender_study",
    )


def test_both_sides_are_read_by_each_surface_s_parameter_names() -> None:
    api = {"baseline": NEW, "contender": None, "contender_runs": "2,1", "baseline_study": None}
    assert parse_sides(API_FIELDS, api) == (ReleaseSide(NEW, "baseline"), RunsSide((1, 2), "contender_runs"))
    page = {"a": "", "b": "", "baseline_study": "7", "contender_study": "8"}
    assert parse_sides(PAGE_FIELDS, page) == (StudySide(7, "baseline_study"), StudySide(8, "contender_study"))
    # the baseline is checked first, as each side was before
    with pytest.raises(ValidationProblem) as err:
        parse_sides(PAGE_FIELDS, {})
    assert _field_error(err.value)[0] == "baseline"


def test_two_releases_give_the_release_comparison(standard: Database) -> None:
    with standard.read() as s:
        got = compare_sides(s, ReleaseSide(OLD, "baseline"), ReleaseSide(NEW, "contender"), options=OPTS)
        expected = svc.build_release_comparison(s, NEW, baseline_ref=OLD, options=OPTS)
    assert isinstance(got, svc.ReleaseComparison) and got.baseline is not None and got.baseline.ref == OLD
    assert svc.json_text(got.json_body()) == svc.json_text(expected.json_body())
    with standard.read() as s:
        with pytest.raises(ValidationProblem) as same:
            compare_sides(s, ReleaseSide(NEW, "a"), ReleaseSide(NEW, "b"))
        assert _field_error(same.value) == ("b", "pick two different releases")
        for old, new, loc in ((f"{seed.IMAGE}:1.0", NEW, "a"), (OLD, "nope:1", "b")):
            with pytest.raises(NotFound) as unknown:
                compare_sides(s, ReleaseSide(old, "a"), ReleaseSide(new, "b"))
            assert unknown.value.errors[0].loc == loc


def test_a_release_against_hand_picked_runs(standard: Database) -> None:
    old_runs = _release_runs(standard, OLD)
    new_ids = tuple(r.id for r in _release_runs(standard, NEW))[:5]
    with standard.read() as s:
        assert side_run_ids(s, ReleaseSide(OLD, "a")) == [r.id for r in old_runs]
        assert side_run_ids(s, RunsSide(new_ids, "contender_runs")) == list(new_ids)
        got = compare_sides(
            s, ReleaseSide(OLD, "baseline"), RunsSide(new_ids, "contender_runs"), options=OPTS
        )
        with pytest.raises(NotFound) as unknown:
            side_run_ids(s, ReleaseSide("nope:1", "baseline"))
    assert unknown.value.errors[0].loc == "baseline"
    assert isinstance(got, svc.RunSetComparison)
    assert (got.baseline.label, got.contender.label) == (OLD, "5 runs")
    assert got.baseline.releases == (OLD,) and got.contender.run_ids == tuple(sorted(new_ids))


def test_a_study_side_stands_for_its_runs(database: Database, seeded: Catalog) -> None:
    plan = {"release": seeded.release, "cluster": seeded.cluster, "variants": seeded.variants}
    with database.transaction() as s:
        study = studies.create_study(
            s,
            StudyPlan.model_validate({**plan, "workloads": seeded.workloads, "repeats": 1, "order_seed": 1}),
        )
        study_id = study.id
    with database.read() as s:
        ids = list(s.scalars(select(Run.id).where(Run.study_id == study_id).order_by(Run.id)))
        assert len(ids) == 3 * 2 and side_run_ids(s, StudySide(study_id, "baseline_study")) == ids
        got = compare_sides(
            s, StudySide(study_id, "baseline_study"), RunsSide(tuple(ids[:2]), "contender_runs")
        )
        with pytest.raises(NotFound) as unknown:
            side_run_ids(s, StudySide(study_id + 1000, "contender_study"))
    assert unknown.value.errors[0].loc == "contender_study"
    assert isinstance(got, svc.RunSetComparison)
    assert (got.baseline.label, got.contender.label) == (f"study #{study_id}", "2 runs")
    assert got.baseline.run_ids == tuple(ids)
