"""The dispatcher on a real local Ray with fast fake runners: claims, order, progress, retries."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from ablate.backend.db.database import Database
from ablate.backend.db.models import Study, Variant
from ablate.backend.schemas.catalog import VariantDef
from ablate.workers.dispatch.dispatcher import Dispatcher
from tests.workers.conftest import CPU1, FAKE, make_settings, queue_study, runs_of
from tests.workers.fakes import FakeRunner

FAKES = {"fake": FakeRunner}


def test_study_runs_in_queue_order_and_records_once(
    ray_local: str, database: Database, tmp_path: Path
) -> None:
    q = queue_study(
        database,
        cluster=CPU1,
        variants=[VariantDef(name="A"), VariantDef(name="B", env={"CHECKPOINT_OPTIMIZATION": "true"})],
        workloads=[FAKE],
        repeats=2,
    )
    d = Dispatcher(make_settings(tmp_path, max_concurrent_runs=1), database, runners=FAKES)
    d.drain(timeout_s=60)
    runs = runs_of(database, q.study_id)
    assert [r.status for r in runs] == ["succeeded"] * 4
    assert all(r.attempt == 1 for r in runs)
    starts = [r.started_at for r in runs]
    assert starts == sorted(starts)  # claimed in queue_order
    with database.read() as s:
        study = s.get(Study, q.study_id)
        assert study is not None and study.status == "succeeded"
        for r in runs:
            assert r.total_steps == 3 and r.current_step == 3
            assert r.lease_expires_at is None


def test_an_invalid_result_fails_its_run_only(ray_local: str, database: Database, tmp_path: Path) -> None:
    # Four fast runs in flight at once finish into the same recording batches: the batch is all or
    # nothing, so the dispatcher records the invalid ones as failed and the rest as they came.
    q = queue_study(
        database,
        cluster=CPU1,
        variants=[VariantDef(name="A"), VariantDef(name="B", runner_options={"nan": True})],
        workloads=[FAKE],
        repeats=2,
    )
    d = Dispatcher(make_settings(tmp_path, max_concurrent_runs=4), database, runners=FAKES)
    d.drain(timeout_s=60)
    with database.read() as s:
        names = {v.id: v.name for v in s.scalars(select(Variant))}
        study = s.get(Study, q.study_id)
        assert study is not None and study.status == "failed"
    runs = runs_of(database, q.study_id)
    by_variant = sorted((names[r.variant_id], r.status, r.failure_kind) for r in runs)
    assert by_variant == [("A", "succeeded", None)] * 2 + [("B", "failed", "benchmark")] * 2
    for r in runs:
        if names[r.variant_id] == "B":
            assert str(r.error).startswith("the runner's result is invalid")
            assert "metrics.throughput_tokens_per_s" in str(r.error)
