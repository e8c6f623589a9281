"""Sweeps of ckpt_layers in plans, the plan-time check of k, and what a torch-llm run records."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError
from sqlalchemy import select

from ablate.backend.cli.releases import load_release_file
from ablate.backend.db.database import Database
from ablate.backend.db.models import Cluster, Run, Variant, Workload
from ablate.backend.domain.runner import RunSpec, get_runner
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import catalog, studies, tokens
from ablate.backend.services.advice import workload_shape
from ablate.backend.services.errors import ValidationProblem
from tests.examples.helpers import PLANS, SWEEP_RELEASE, load_yaml
from tests.support.live_server import start_live_server

SWEEP_PLAN = PLANS / "cpu-ckpt-sweep.yaml"


def plan(**changes: object) -> StudyPlan:
    data = load_yaml(SWEEP_PLAN)
    data.update(changes)
    return StudyPlan.model_validate(data)


def test_a_sweep_expands_into_one_variant_per_value() -> None:
    p = plan(
        variants=[{"name": "Opt", "position": 4, "factors": ["compiler_opt", "CkptOpt"], "env": {"A": "1"}}]
    )
    assert p.sweep is None  # expanded, so the stored plan lists what runs
    assert [v.name for v in p.variants] == [f"Opt ckpt_layers={k}" for k in (0, 2, 4, 6, 8)]
    assert [v.position for v in p.variants] == [400, 401, 402, 403, 404]
    zero, *rest = p.variants
    assert (
        zero.factors == ["compiler_opt"]
        and zero.env == {"A": "1"}
        and zero.runner_options == {"ckpt_layers": 0}
    )
    for v, k in zip(rest, (2, 4, 6, 8), strict=True):
        assert v.factors == ["compiler_opt", "ckpt_opt"]
        assert v.env == {"A": "1", "CHECKPOINT_OPTIMIZATION": "true"} and v.runner_options == {
            "ckpt_layers": k
        }
    again = StudyPlan.model_validate(p.model_dump(mode="json"))
    assert again.variants == p.variants  # re-submitting the stored plan queues the same runs


@pytest.mark.parametrize(
    ("changes", "text"),
    [
        ({"variants": ["Base"]}, "is given by name"),
        ({"sweep": {"ckpt_layers": [0, 2, 2]}}, "lists a value twice"),
        ({"sweep": {"ckpt_layers": []}}, "at least 1 item"),
        ({"sweep": {"ckpt_layers": [-1]}}, "greater than or equal to 0"),
        (
            {"sweep": {"ckpt_layers": list(range(13))}, "variants": [{"name": f"v{i}"} for i in range(5)]},
            "at most 64",
        ),
        ({"sweep": {"ckpt_layers": [0], "repeats": 2}}, "Extra inputs are not permitted"),
    ],
)
def test_bad_sweeps_are_refused(changes: dict[str, object], text: str) -> None:
    with pytest.raises(ValidationError, match=text):
        plan(**changes)


def test_the_sweep_plan_queues_its_runs(database: Database) -> None:
    with database.transaction() as session:
        catalog.import_release(session, load_release_file(SWEEP_RELEASE))
        study = studies.create_study(session, plan())
        assert len(study.runs) == 5 * 2
    with database.read() as session:
        rows = session.execute(
            select(Variant.name, Variant.runner_options).join(Run, Run.variant_id == Variant.id)
        )
        seen = {name: opts["ckpt_layers"] for name, opts in rows}
    assert seen == {f"Base ckpt_layers={k}": k for k in (0, 2, 4, 6, 8)}


def test_more_checkpointed_layers_than_the_model_has_is_refused(database: Database) -> None:
    with database.transaction() as session:
        catalog.import_release(session, load_release_file(SWEEP_RELEASE))
    with pytest.raises(ValidationProblem) as err, database.transaction() as session:
        studies.create_study(session, plan(sweep={"ckpt_layers": [0, 9]}))
    assert err.value.errors[0].loc == "variants[1].runner_options.ckpt_layers"
    assert "ckpt_layers 9 outside 0..8" in err.value.detail
    with database.read() as session:  # nothing half-written
        assert session.scalars(select(Run)).first() is None


def test_a_torch_llm_run_records_what_the_advisor_reads(tmp_path: Path) -> None:
    spec = RunSpec(
        run_id=1,
        workload={"name": "w", "model": "tiny", "seq_len": 32, "micro_batch": 2, "precision": "bf16",
                  "warmup_steps": 0, "measured_steps": 1, "runner": "torch-llm",
                  "runner_options": {"n_layers": 3}},
        variant={"name": "v", "factors": ["ckpt_opt"], "runner_options": {"ckpt_layers": 2}},
        cluster={"name": "c", "accelerator": "cpu"},
        env={"OMP_NUM_THREADS": "1"},
        log_dir=str(tmp_path),
        timeout_s=240,
    )  # fmt: skip
    res = get_runner("torch-llm").run(spec)
    assert res.succeeded, res.error
    p = res.provenance
    assert p["ckpt_layers"] == "2" and p["activation_checkpointing"] == "2/3 layers"
    shape = {k: p[k] for k in ("model_layers", "model_dim", "model_heads", "model_kv_heads", "model_vocab")}
    assert shape == {"model_layers": "3", "model_dim": "64", "model_heads": "4", "model_kv_heads": "4",
                     "model_vocab": "512"}  # fmt: skip
    assert (p["seq_len"], p["micro_batch"], p["attention"]) == ("32", "2", "sdpa")
    assert p["peak_memory_measure"].startswith("VmHWM") and res.metrics["peak_memory_gib"][0] > 0
    # a workload that names no preset gets its shape from that provenance
    bare = Workload(name="ci", model="in-house", runner="command", runner_options={}, tensor_parallel=1,
                    pipeline_parallel=1, data_parallel=1)  # fmt: skip
    cpu = Cluster(name="c", accelerator="cpu", nodes=1, devices_per_node=1)
    got, source = workload_shape(bare, cpu, p)
    assert source == "provenance of its latest run"
    assert (got.n_layers, got.hidden, got.n_heads, got.vocab_size, got.seq_len, got.micro_batch) == (
        3,
        64,
        4,
        512,
        32,
        2,
    )
    assert got.gated_mlp and got.tie_embeddings and got.attention == "sdpa"


def test_a_sweep_plan_over_the_api(db_url: str) -> None:
    live = start_live_server(db_url)
    try:
        with live.database.transaction() as session:
            catalog.import_release(session, load_release_file(SWEEP_RELEASE))
            _, secret = tokens.create_token(session, "admin", "admin")
        headers = {"Authorization": f"Bearer {secret}"}
        body = load_yaml(SWEEP_PLAN)
        r = httpx.post(f"{live.api}/studies", json=body, headers=headers, timeout=60)
        assert r.status_code == 201, r.text
        study = r.json()
        assert study["variants"] == [f"Base ckpt_layers={k}" for k in (0, 2, 4, 6, 8)]
        assert len(study["runs"]) == 10 and study["plan"]["sweep"] is None  # stored expanded
        assert [v["name"] for v in study["plan"]["variants"]] == study["variants"]
        bad = httpx.post(
            f"{live.api}/studies",
            json={**body, "sweep": {"ckpt_layers": [0, 16]}},
            headers=headers,
            timeout=60,
        )
        assert bad.status_code == 422 and bad.headers["content-type"].startswith("application/problem+json")
        assert "ckpt_layers 16 outside 0..8" in bad.json()["detail"]
        named = httpx.post(
            f"{live.api}/studies", json={**body, "variants": ["Base"]}, headers=headers, timeout=60
        )
        assert named.status_code == 422 and "is given by name" in named.text
    finally:
        live.stop()
