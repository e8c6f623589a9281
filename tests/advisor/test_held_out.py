"""The advisor against real CPU runs: a ckpt_layers sweep of the torch-llm runner (peak RSS of the
run process), one k held out, its measurement inside the predicted interval.

The shape is the example sweep plan's (examples/plans/cpu-ckpt-sweep.yaml): 8 narrow layers over
16 x 256 tokens in fp32, where each layer keeps about 40 MiB for backward, so activations are what
varies with k. Five runs of two steps each, once per module; stored and advised on both databases.
"""

from __future__ import annotations

from typing import Any

import pytest

from ablate.backend.cli.releases import load_release_file
from ablate.backend.db.database import Database
from ablate.backend.domain.runner import RunResult, RunSpec, get_runner
from ablate.backend.schemas.results import ResultsBatch
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import catalog
from ablate.backend.services.advice import checkpointing_advice
from ablate.backend.services.ingest import submit_results
from tests.examples.helpers import DEMO_RELEASE, PLANS, load_yaml

pytestmark = pytest.mark.slow
HELD_OUT = 4


def _plan() -> StudyPlan:
    return StudyPlan.model_validate(load_yaml(PLANS / "cpu-ckpt-sweep.yaml"))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[int, RunResult]:
    plan = _plan()
    (workload,) = plan.workloads
    assert not isinstance(workload, str)
    wl = {**workload.model_dump(mode="json"), "measured_steps": 1}  # two steps: warm-up and one measured
    logs = tmp_path_factory.mktemp("sweep-logs")
    runner = get_runner("torch-llm")
    out = {}
    for variant in plan.variants:
        assert not isinstance(variant, str)
        spec = RunSpec(
            run_id=len(out) + 1,
            workload=wl,
            variant=variant.model_dump(mode="json"),
            cluster={"name": "cpu-local", "accelerator": "cpu"},
            env={"OMP_NUM_THREADS": "1", **variant.env},
            log_dir=str(logs),
            timeout_s=300,
        )
        res = runner.run(spec)
        assert res.succeeded, f"{res.error}\n{res.log_tail}"
        out[int(res.provenance["ckpt_layers"])] = res
    assert sorted(out) == [0, 2, 4, 6, 8]
    return out


def _result(plan: StudyPlan, k: int, res: RunResult) -> dict[str, Any]:
    variant = next(
        v for v in plan.variants if not isinstance(v, str) and v.runner_options["ckpt_layers"] == k
    )
    return {
        "release": "ablate-demo:0.1",
        "cluster": plan.cluster.model_dump(mode="json", exclude_unset=True),  # type: ignore[union-attr]
        "workload": plan.workloads[0].model_dump(mode="json", exclude_unset=True),  # type: ignore[union-attr]
        "variant": variant.model_dump(mode="json", exclude_unset=True),  # type: ignore[union-attr]
        "metrics": {name: {"value": v, "unit": u} for name, (v, u) in res.metrics.items()},
        "provenance": res.provenance,
        "environment": res.environment,
    }


def test_held_out_k_lies_in_its_prediction_interval(database: Database, sweep: dict[int, RunResult]) -> None:
    plan = _plan()
    train = [k for k in sweep if k != HELD_OUT]
    with database.transaction() as session:
        catalog.import_release(session, load_release_file(DEMO_RELEASE))
        batch = ResultsBatch.model_validate({"results": [_result(plan, k, sweep[k]) for k in train]})
        ids = submit_results(session, batch, token_scope="admin", idempotency_key=None).run_ids
    with database.read() as session:
        got = checkpointing_advice(
            session, "ablate-demo:0.1", "cpu-local-1gib", "torch-llm-small-8l-activations", memory_gib=4.0
        )
    advice = got.advice
    assert advice.basis == "measured" and sorted(advice.memory_run_ids) == sorted(ids)
    assert got.shape.n_layers == 8 and got.shape.precision == "fp32" and got.shape.attention == "sdpa"
    measured = {k: r.metrics["peak_memory_gib"][0] for k, r in sweep.items()}
    assert measured[0] > measured[HELD_OUT] > measured[8]  # activations do vary with k here
    row = advice.table[HELD_OUT]
    assert row.measured_peak_gib == ()  # held out indeed
    # A 95% interval misses one held-out run in twenty by design (benchmarks/advisor.py measures its
    # coverage: 22 of 24), and a CI failure must mean a wrong model, not that twentieth run: the
    # measurement must lie within the interval widened by half on each side (about 3 sigma).
    centre, half = (row.high_gib + row.low_gib) / 2, (row.high_gib - row.low_gib) / 2
    assert abs(measured[HELD_OUT] - centre) <= 1.5 * half, (row, measured)
    # and the interval says something: narrower than the span that checkpointing moves the peak
    assert row.high_gib - row.low_gib < measured[0] - measured[8], (row, measured)
