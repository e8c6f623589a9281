"""Excluded runs leave every analysis and come back when included (both databases); deletions remove
everything of a study or release and leave their audit record."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from ablate.backend import reports
from ablate.backend.db.database import Database
from ablate.backend.db.models import (
    AuditEvent,
    Cluster,
    Release,
    Run,
    RunMetric,
    RunSeries,
    Study,
    Variant,
    Workload,
)
from ablate.backend.services import comparison as svc
from ablate.backend.services import hygiene
from ablate.backend.services.errors import Conflict, NotFound
from ablate.backend.services.tokens import Principal
from tests.reports import seed

OPTS = svc.ComparisonOptions(n_resamples=499)
TPUT = "throughput_tokens_per_s"
QWEN = "megatron/qwen2-7b"
REF = f"{seed.IMAGE}:25.12"
WHO = Principal(1, "test-admin", "admin")


@pytest.fixture
def standard(database: Database) -> Database:
    seed.seed_standard(database)
    return database


def _run_id(database: Database, tag: str, workload: str, variant: str, repeat: int) -> int:
    with database.read() as s:
        return s.scalars(
            select(Run.id)
            .join(Release, Run.release_id == Release.id)
            .join(Workload, Run.workload_id == Workload.id)
            .join(Variant, Run.variant_id == Variant.id)
            .where(
                Release.tag == tag, Workload.name == workload, Variant.name == variant, Run.repeat == repeat
            )
        ).one()


def _comparison(database: Database) -> dict[str, Any]:
    with database.read() as s:
        return svc.build_release_comparison(s, REF, options=OPTS).to_json_dict()


def _delta(comp: dict[str, Any], variant: str) -> dict[str, Any]:
    return next(
        d for d in comp["deltas"] if d["workload"] == QWEN and d["variant"] == variant and d["metric"] == TPUT
    )


def _cell(comp: dict[str, Any], variant: str) -> dict[str, Any]:
    return next(c for c in comp["cells"] if c["workload"] == QWEN and c["variant"] == variant)


def test_excluded_runs_leave_the_release_comparison_and_return_when_included(standard: Database) -> None:
    before = _comparison(standard)
    # One run of this release (a ladder rung and a delta) and one of a lookback release (25.10).
    current = _run_id(standard, "25.12", QWEN, "Base+ACCL", 0)
    lookback = _run_id(standard, "25.10", QWEN, "Base", 1)
    with standard.transaction() as s:
        hygiene.exclude_run(s, current, "wrong image pushed under this tag", WHO)
        hygiene.exclude_run(s, lookback, "host was swapping", WHO)
    after = _comparison(standard)

    assert (_cell(before, "Base+ACCL")["succeeded"], _cell(after, "Base+ACCL")["succeeded"]) == (5, 4)
    left_out = _cell(after, "Base+ACCL")["not_succeeded"]
    assert [(r["run_id"], r["status"], r["error"]) for r in left_out] == [
        (current, "excluded", "wrong image pushed under this tag")
    ]
    assert any(f"run {current} excluded" in m for m in after["missing"]), after["missing"]
    assert _delta(after, "Base+ACCL")["result"] != _delta(before, "Base+ACCL")["result"]
    old_history = {h["release"]: h["n"] for h in _delta(before, "Base")["history"]}
    new_history = {h["release"]: h["n"] for h in _delta(after, "Base")["history"]}
    assert (old_history[f"{seed.IMAGE}:25.10"], new_history[f"{seed.IMAGE}:25.10"]) == (5, 4)
    assert all(r["status"] == "excluded" for r in after["runs"] if r["run_id"] == current)

    with standard.transaction() as s:
        hygiene.include_run(s, current, None, WHO)
        hygiene.include_run(s, lookback, "false alarm", WHO)
    assert _comparison(standard) == before


def test_an_excluded_run_is_left_out_of_compare_with_its_reason(standard: Database) -> None:
    ids = [_run_id(standard, "25.12", QWEN, "Base", r) for r in range(5)]
    other = [_run_id(standard, "25.11", QWEN, "Base", r) for r in range(5)]
    with standard.read() as s:
        before = svc.compare_run_sets(s, other, ids, options=OPTS)
    with standard.transaction() as s:
        hygiene.exclude_run(s, ids[0], "bad node", WHO)
    with standard.read() as s:
        after = svc.compare_run_sets(s, other, ids, options=OPTS)
    assert any(f"run {ids[0]}" in m and "excluded" in m for m in after.missing), after.missing
    assert after.deltas[0].result != before.deltas[0].result


def test_exclusion_conflicts_and_unknown_runs(standard: Database) -> None:
    run_id = _run_id(standard, "25.12", QWEN, "Base", 0)
    with standard.transaction() as s:
        hygiene.exclude_run(s, run_id, "first", WHO)
    with standard.transaction() as s, pytest.raises(Conflict, match="already excluded"):
        hygiene.exclude_run(s, run_id, "second", WHO)
    with standard.transaction() as s:
        hygiene.include_run(s, run_id, None, WHO)
    with standard.transaction() as s, pytest.raises(Conflict, match="not excluded"):
        hygiene.include_run(s, run_id, None, WHO)
    with standard.transaction() as s, pytest.raises(NotFound, match="run 999999"):
        hygiene.exclude_run(s, 999_999, "x", WHO)
    with standard.read() as s:
        actions = list(s.scalars(select(AuditEvent.action).order_by(AuditEvent.id)))
    assert actions == ["exclude_run", "include_run"]


def _count(database: Database, model: Any) -> int:
    with database.read() as s:
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


def test_deleting_a_release_removes_everything_in_it_and_keeps_the_audit(standard: Database) -> None:
    with standard.read() as s:
        release_id = s.scalars(select(Release.id).where(Release.tag == "25.12")).one()
        runs = s.scalar(select(func.count()).where(Run.release_id == release_id))
        metrics = s.scalar(
            select(func.count()).select_from(RunMetric).join(Run).where(Run.release_id == release_id)
        )
        series = s.scalar(
            select(func.count()).select_from(RunSeries).join(Run).where(Run.release_id == release_id)
        )
    total_runs = _count(standard, Run)
    excluded = _run_id(standard, "25.12", QWEN, "Base", 0)
    with standard.transaction() as s:
        hygiene.exclude_run(s, excluded, "bad", WHO)
    with standard.transaction() as s:
        counts, _event = hygiene.delete_release(s, REF, WHO)
    assert counts == {
        "releases": 1,
        "studies": 0,
        "runs": runs,
        "run_metrics": metrics,
        "run_series": series,
        "run_series_levels": 0,
    }
    assert runs and metrics
    assert _count(standard, Run) == total_runs - runs
    with standard.read() as s:
        with pytest.raises(NotFound):
            svc.build_release_comparison(s, REF, options=OPTS)
        kept, _ = hygiene.list_audit(s, release=REF)
    assert [(e.action, e.run_id) for e in kept] == [("delete_release", None), ("exclude_run", excluded)]
    assert kept[0].details["deleted"] == counts and excluded in kept[0].details["run_ids"]
    # the release before it is untouched and still compares (now the newest of its family)
    assert _comparison_of(standard, f"{seed.IMAGE}:25.11")["release"]["ref"] == f"{seed.IMAGE}:25.11"


def _comparison_of(database: Database, ref: str) -> dict[str, Any]:
    with database.read() as s:
        return svc.build_release_comparison(s, ref, options=OPTS).to_json_dict()


def test_deleting_a_study_refuses_while_runs_are_active(database: Database) -> None:
    with database.transaction() as s:
        release = Release(image="img", tag="1", platform="gpu")
        cluster = Cluster(name="c", accelerator="cpu")
        variant, workload = Variant(name="v"), Workload(name="w")
        study = Study(name="s", release=release, cluster=cluster, repeats=2)
        s.add_all([release, cluster, variant, workload, study])
        s.flush()
        for repeat, status in enumerate(("succeeded", "running")):
            s.add(
                Run(
                    study_id=study.id,
                    release_id=release.id,
                    variant_id=variant.id,
                    workload_id=workload.id,
                    cluster_id=cluster.id,
                    repeat=repeat,
                    status=status,
                    metrics=[RunMetric(name="step_time_s", value=1.0, unit="s")],
                )
            )
        study_id = study.id
    with (
        database.transaction() as s,
        pytest.raises(Conflict, match=r"run \d+ \(running\).*cancel them first"),
    ):
        hygiene.delete_study(s, study_id, WHO)
    with database.transaction() as s, pytest.raises(Conflict, match="running"):
        hygiene.delete_release(s, "img:1", WHO)
    with database.transaction() as s, pytest.raises(Conflict, match="only a finished run"):
        hygiene.exclude_run(s, s.scalars(select(Run.id).where(Run.status == "running")).one(), "x", WHO)
    assert (_count(database, Run), _count(database, AuditEvent)) == (2, 0)
    with database.transaction() as s:
        s.execute(Run.__table__.update().values(status="cancelled").where(Run.status == "running"))
    with database.transaction() as s:
        counts, _event = hygiene.delete_study(s, study_id, WHO)
    assert counts == {"studies": 1, "runs": 2, "run_metrics": 2, "run_series": 0, "run_series_levels": 0}
    assert (_count(database, Run), _count(database, Study), _count(database, Release)) == (0, 0, 1)


def test_reports_in_every_format_leave_the_excluded_run_out(standard: Database) -> None:
    def render_all() -> dict[str, str]:
        with standard.read() as s:
            comp = svc.build_release_comparison(s, REF, options=OPTS)
        return {fmt: reports.render(comp, fmt) for fmt in reports.FORMATS}

    before = render_all()
    run_id = _run_id(standard, "25.12", QWEN, "Base+ACCL", 0)
    with standard.transaction() as s:
        hygiene.exclude_run(s, run_id, "wrong image pushed under this tag", WHO)
    after = render_all()
    assert all(after[fmt] != before[fmt] for fmt in reports.FORMATS)
    assert f"run {run_id} excluded: wrong image pushed under this tag" in after["md"]
    with standard.transaction() as s:
        hygiene.include_run(s, run_id, None, WHO)
    assert render_all() == before
