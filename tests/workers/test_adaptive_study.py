"""Adaptive repeats end to end: a real local Ray, the dispatcher in process, a command benchmark that
prints a throughput per rung. Base / +30% / unchanged with repeats {min: 3, max: 8}: every comparison
is decided after the first 3 rounds, so no rung gets a fourth run (3 x 3 runs, not 3 x 8). And a rung
too noisy to judge gets its further rounds queued after each one completes, up to max."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ablate.backend.db.database import Database
from ablate.backend.db.models import Cluster, Variant, Workload
from ablate.backend.schemas.catalog import ReleaseCreate, VariantDef, WorkloadDef
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import adaptive, catalog, studies
from tests.workers.conftest import CPU1, make_settings, runs_of
from workers.dispatch.dispatcher import Dispatcher


def _bench(speed: float) -> str:
    """Two JSONL steps at ``speed`` x 1000 tokens/s with 0.3% noise (the runs are real processes)."""
    return (
        'python3 -c "import json, random; '
        f"[print(json.dumps({{'step': i, 'throughput_tokens_per_s': {1000.0 * speed} * "
        '(1 + 0.003 * random.gauss(0, 1))})) for i in (1, 2)]"'
    )


def _sequence(counter: Path, values: list[float]) -> str:
    """The k-th run of this rung prints values[k]: reproducible noise (a rung's runs never overlap,
    one per round)."""
    return (
        'python3 -c "import json, os; '
        f"p = '{counter}'; k = os.path.getsize(p) if os.path.exists(p) else 0; open(p, 'a').write('x'); "
        f"v = {values}[k % {len(values)}]; "
        "[print(json.dumps({'step': i, 'throughput_tokens_per_s': v})) for i in (1, 2)]\""
    )


LADDER = [("adaptive-base", 1.0), ("adaptive-plus30", 1.3), ("adaptive-same", 1.3)]
BENCH = WorkloadDef(name="adaptive-cmd", runner="command", parser="jsonl", warmup_steps=0,
                    runner_options={"command": _bench(1.0)})  # fmt: skip


def test_decided_rungs_stop_at_min_and_the_study_uses_fewer_runs_than_max(
    ray_local: str, database: Database, tmp_path: Path
) -> None:
    with database.transaction() as s:
        catalog.create_release(s, ReleaseCreate(image="training-nv-pytorch", tag="25.12", platform="gpu"))
        catalog.resolve_named(s, Cluster, CPU1, "test")
        catalog.resolve_named(s, Workload, BENCH, "test")
        for position, (name, speed) in enumerate(LADDER):
            variant = VariantDef(name=name, position=position, runner_options={"command": _bench(speed)})
            catalog.resolve_named(s, Variant, variant, "test")
        plan = StudyPlan.model_validate(
            {
                "release": "training-nv-pytorch:25.12",
                "cluster": CPU1.name,
                "variants": [name for name, _ in LADDER],
                "workloads": [BENCH.name],
                "repeats": {"min": 3, "max": 8},
                "order_seed": 11,
            }
        )
        study_id = studies.create_study(s, plan).id
    Dispatcher(make_settings(tmp_path), database).drain(timeout_s=400)
    runs = runs_of(database, study_id)
    assert all(r.status == "succeeded" for r in runs), [(r.status, r.error) for r in runs]
    per_rung = Counter(r.variant_id for r in runs)
    assert sorted(per_rung.values()) == [3, 3, 3] and len(runs) < 3 * 8
    with database.read() as s:
        study = studies.get_study(s, study_id)
        assert study.status == "succeeded"
        info = adaptive.summary(s, study)
    assert info is not None and info["runs"] == 9 and info["runs_saved"] == 24 - 9
    got = {(c["rung"], c["against"]): (c["verdict"], c["n"]) for c in info["comparisons"]}
    assert got == {
        ("adaptive-plus30", "adaptive-base"): ("improved", 3),
        ("adaptive-same", "adaptive-plus30"): ("unchanged", 3),
    }


def test_an_undecided_rung_gets_rounds_queued_up_to_max(
    ray_local: str, database: Database, tmp_path: Path
) -> None:
    ladder = [
        ("adaptive-steady", [1000.0, 1010.0, 990.0, 1005.0]),
        ("adaptive-noisy", [1000.0, 1400.0, 700.0, 1300.0]),  # +6% under ~30% noise: no verdict
    ]
    with database.transaction() as s:
        catalog.create_release(s, ReleaseCreate(image="training-nv-pytorch", tag="25.12", platform="gpu"))
        catalog.resolve_named(s, Cluster, CPU1, "test")
        catalog.resolve_named(s, Workload, BENCH, "test")
        for position, (name, values) in enumerate(ladder):
            command = _sequence(tmp_path / f"{name}.count", values)
            variant = VariantDef(name=name, position=position, runner_options={"command": command})
            catalog.resolve_named(s, Variant, variant, "test")
        plan = StudyPlan.model_validate(
            {
                "release": "training-nv-pytorch:25.12",
                "cluster": CPU1.name,
                "variants": [name for name, _ in ladder],
                "workloads": [BENCH.name],
                "repeats": {"min": 2, "max": 4},
                "order_seed": 12,
            }
        )
        study = studies.create_study(s, plan)
        assert len(study.runs) == 2 * 2
        study_id = study.id
    Dispatcher(make_settings(tmp_path), database).drain(timeout_s=400)
    runs = runs_of(database, study_id)
    assert all(r.status == "succeeded" for r in runs), [(r.status, r.error) for r in runs]
    assert sorted(Counter(r.variant_id for r in runs).values()) == [4, 4]
    assert sorted(r.repeat for r in runs) == [0, 0, 1, 1, 2, 2, 3, 3]
    with database.read() as s:
        info = adaptive.summary(s, studies.get_study(s, study_id))
    assert info is not None and info["runs_saved"] == 0
    (comparison,) = info["comparisons"]
    assert comparison["verdict"] == "inconclusive" and comparison["n"] == 4
    assert comparison["detectable_pct"] > 50
