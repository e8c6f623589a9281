"""Adaptive repeats in the studies service: rounds are queued one at a time after min, and only for the
rungs an undecided comparison still needs; the summary says where each comparison stands."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from pydantic import ValidationError
from sqlalchemy import select

from ablate.backend.analysis.sequential import look
from ablate.backend.db.database import Database
from ablate.backend.db.models import Run, Variant
from ablate.backend.domain.runner import RunResult
from ablate.backend.schemas.catalog import VariantDef
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import adaptive, catalog, ingest, studies
from tests.services.conftest import Catalog


def _plan(c: Catalog, repeats: object, **more: object) -> StudyPlan:
    data = {"release": c.release, "cluster": c.cluster, "variants": c.variants, "workloads": c.workloads[:1]}
    return StudyPlan.model_validate({**data, "repeats": repeats, "order_seed": 5, **more})


def _finish_all(
    database: Database, study_id: int, speed: dict[str, float], cv: float, slower: int | None = None
) -> int:
    """Record every queued run as a dispatcher would, round after round, until none is queued;
    returns the rounds it took. Noise is a fixed zig-zag of ``cv`` (reproducible); the release with id
    ``slower`` runs at half speed."""
    rounds = 0
    while True:
        with database.transaction() as s:
            queued = s.scalars(
                select(Run).where(Run.study_id == study_id, Run.status == "queued").order_by(Run.queue_order)
            ).all()
            if not queued:
                return rounds
            rounds += 1
            for run in queued:
                name = s.get(Variant, run.variant_id).name  # type: ignore[union-attr]
                wiggle = cv * math.sin(1.7 * run.repeat + 3.1 * run.variant_id)
                value = 1000.0 * speed[name] * (1 + wiggle) * (0.5 if run.release_id == slower else 1.0)
                result = RunResult("succeeded", metrics={"throughput_tokens_per_s": (value, "tokens/s")})
                ingest.record_run_result(s, run, result)


def test_plan_repeats_min_max_is_validated(seeded: Catalog) -> None:
    plan = _plan(seeded, {"min": 3, "max": 8})
    assert plan.first_rounds == 3 and plan.max_repeats == 8 and plan.advisories() == []
    with pytest.raises(ValidationError, match=r"repeats.min \(9\) is above repeats.max \(8\)"):
        _plan(seeded, {"min": 9, "max": 8})
    with pytest.raises(ValidationError):
        _plan(seeded, {"min": 1, "max": 8})  # one run a side cannot be tested


def test_decided_rungs_stop_and_the_summary_says_so(database: Database, seeded: Catalog) -> None:
    base, faster, same = seeded.variants
    with database.transaction() as s:
        study = studies.create_study(s, _plan(seeded, {"min": 3, "max": 8}))
        assert len(study.runs) == 3 * 3 and study.repeats == 8  # min rounds queued up front
        study_id = study.id
    rounds = _finish_all(database, study_id, {base: 1.0, faster: 1.3, same: 1.3}, cv=0.003)
    with database.read() as s:
        study = studies.get_study(s, study_id)
        assert study.status == "succeeded"
        runs = s.scalars(select(Run).where(Run.study_id == study_id)).all()
        info = adaptive.summary(s, study)
    assert rounds == 1 and len(runs) == 9
    assert info is not None and info["runs"] == 9 and info["runs_saved"] == 3 * 8 - 9
    verdicts = {(c["rung"], c["against"]): (c["verdict"], c["n"]) for c in info["comparisons"]}
    assert verdicts == {(faster, base): ("improved", 3), (same, faster): ("unchanged", 3)}


def test_undecided_comparisons_run_on_to_max_and_end_inconclusive(
    database: Database, seeded: Catalog
) -> None:
    base, faster, same = seeded.variants
    with database.transaction() as s:
        study_id = studies.create_study(s, _plan(seeded, {"min": 3, "max": 5})).id
    # +3% under 8% noise: no look can tell; every rung runs to max
    rounds = _finish_all(database, study_id, {base: 1.0, faster: 1.03, same: 1.03}, cv=0.08)
    with database.read() as s:
        study = studies.get_study(s, study_id)
        counts = Counter(r.variant_id for r in s.scalars(select(Run).where(Run.study_id == study_id)))
        info = adaptive.summary(s, study)
    assert rounds == 3 and set(counts.values()) == {5}
    assert info is not None and info["runs_saved"] == 0 and info["inconclusive"] >= 1
    inconclusive = [c for c in info["comparisons"] if c["verdict"] == "inconclusive"]
    assert all(c["n"] == 5 and c["detectable_pct"] > 3 for c in inconclusive)


def test_a_cancelled_adaptive_study_gets_no_new_round(database: Database, seeded: Catalog) -> None:
    with database.transaction() as s:
        study = studies.create_study(s, _plan(seeded, {"min": 2, "max": 6}))
        studies.cancel_study(s, study.id)
    with database.read() as s:
        statuses = Counter(s.scalars(select(Run.status).where(Run.study_id == study.id)))
    assert statuses == {"cancelled": 6}


def test_fixed_repeats_are_unchanged(database: Database, seeded: Catalog) -> None:
    with database.transaction() as s:
        study = studies.create_study(s, _plan(seeded, 4))
        assert len(study.runs) == 3 * 4 and adaptive.summary(s, study) is None


def test_with_a_baseline_each_rung_is_also_judged_against_the_baseline_rung(
    database: Database, seeded: Catalog
) -> None:
    from tests.services.test_studies import _second_release

    base, faster, same = seeded.variants
    old = _second_release(database)
    with database.transaction() as s:
        study_id = studies.create_study(s, _plan(seeded, {"min": 3, "max": 6}, baseline=old)).id
    # both releases equally fast: the ladder steps and the release-vs-baseline pairs all decided at 3
    rounds = _finish_all(database, study_id, {base: 1.0, faster: 1.3, same: 1.3}, cv=0.003)
    with database.read() as s:
        study = studies.get_study(s, study_id)
        runs = s.scalars(select(Run).where(Run.study_id == study_id)).all()
        info = adaptive.summary(s, study)
    assert rounds == 1 and len(runs) == 3 * 2 * 3
    assert info is not None and info["runs_saved"] == 3 * 2 * 6 - 18
    against = Counter(c["against"] for c in info["comparisons"])
    assert against[f"baseline {old}"] == 3 and against[base] == 1 and against[faster] == 1
    assert all(
        c["verdict"] == "unchanged" for c in info["comparisons"] if c["against"].startswith("baseline")
    )


def test_only_the_sides_an_open_comparison_needs_run_on(database: Database, seeded: Catalog) -> None:
    """The baseline runs at half the release's speed (decided at 3); the ladder steps stay open under
    8% noise: the release's rungs run on to max, the baseline's stop at 3."""
    from tests.services.test_studies import _second_release

    base, faster, same = seeded.variants
    old = _second_release(database)
    with database.transaction() as s:
        study = studies.create_study(s, _plan(seeded, {"min": 3, "max": 5}, baseline=old))
        study_id, release_id = study.id, study.release_id
        old_id = next(r.release_id for r in study.runs if r.release_id != release_id)
    _finish_all(database, study_id, {base: 1.0, faster: 1.03, same: 1.03}, cv=0.08, slower=old_id)
    with database.read() as s:
        runs = s.scalars(select(Run).where(Run.study_id == study_id)).all()
    per_side = Counter(r.release_id == release_id for r in runs)
    assert per_side == {True: 3 * 5, False: 3 * 3}


def test_a_workload_with_enough_sides_decides_on_its_pooled_prior(
    database: Database, seeded: Catalog
) -> None:
    """Ten rungs on one workload (10 sides, the moderated prior's minimum): the +4% step is decided
    at the first look on the workload's prior, where its own 4 degrees of freedom leave it open."""
    names = [f"R{i}" for i in range(10)]
    with database.transaction() as s:
        for pos, name in enumerate(names):
            catalog.create_named(s, Variant, VariantDef(name=name, position=10 + pos, factors=[]))
        plan = StudyPlan.model_validate(
            {
                "release": seeded.release,
                "cluster": seeded.cluster,
                "variants": names,
                "workloads": seeded.workloads[:1],
                "repeats": {"min": 3, "max": 10},
                "order_seed": 5,
            }
        )
        study_id = studies.create_study(s, plan).id
    speed = {n: (1.04 if i >= 5 else 1.0) for i, n in enumerate(names)}
    _finish_all(database, study_id, speed, cv=0.015)
    with database.read() as s:
        study = studies.get_study(s, study_id)
        found, _ = adaptive.decisions(s, study)
        design = adaptive.design_of(study)
        runs = s.scalars(select(Run).where(Run.study_id == study_id)).all()
        values = {
            name: [
                m.value
                for r in sorted(runs, key=lambda r: r.repeat)
                if r.variant.name == name
                for m in r.metrics
                if m.name == adaptive.ADAPTIVE_METRIC
            ][:3]
            for name in ("R4", "R5")
        }
    step = next(d for d in found if d.rung == "R5")
    assert (step.look.verdict, step.look.n) == ("improved", 3)
    assert look(design.alone(), values["R5"], values["R4"], "higher").verdict is None
