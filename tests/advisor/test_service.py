"""How the advice service reads stored runs: k from provenance or variant, which memory metric,
shapes from runner options, the device memory from the cluster definition or a label; on both
databases."""

from __future__ import annotations

from typing import Any

import pytest

from ablate.backend.db.database import Database
from ablate.backend.db.models import Cluster
from ablate.backend.schemas.catalog import ClusterDef
from ablate.backend.schemas.results import ResultsBatch
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import catalog
from ablate.backend.services.advice import checkpointing_advice
from ablate.backend.services.errors import ValidationProblem
from ablate.backend.services.ingest import submit_results
from tests.examples.helpers import PLANS, load_yaml

RELEASE = {"image": "img", "tag": "1", "platform": "gpu"}
CLUSTER = {"name": "lab", "accelerator": "gpu", "devices_per_node": 1, "labels": {"memory_gib": "48"}}
TORCH = {"name": "t", "model": "llama-1b", "seq_len": 1024, "micro_batch": 1, "runner": "torch-llm"}
CUSTOM = {
    "name": "in-house",
    "model": "in-house-13l",
    "runner": "command",
    "seq_len": 2048,
    "micro_batch": 2,
    "runner_options": {"n_layers": 13, "dim": 1024, "n_heads": 16, "vocab_size": 32000, "attention": "eager"},
}


def result(
    workload: dict[str, Any], variant: dict[str, Any], metrics: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    return {
        "release": RELEASE,
        "cluster": CLUSTER,
        "workload": workload,
        "variant": variant,
        "metrics": metrics,
        **extra,
    }


def seed(database: Database) -> list[int]:
    rows = [
        # k from the provenance the runner recorded before ckpt_layers existed
        result(
            TORCH,
            {"name": "a"},
            {"peak_memory_gib": 30.0},
            provenance={"activation_checkpointing": "4/16 layers"},
        ),
        # k from the variant's runner option; the reserved peak wins over the allocated one
        result(
            TORCH,
            {"name": "b", "factors": ["ckpt_opt"], "runner_options": {"ckpt_layers": 8}},
            {"peak_memory_gib": 20.0, "peak_memory_reserved_gib": 22.0},
        ),
        # torch-llm with ckpt_opt and no option checkpoints every layer
        result(TORCH, {"name": "c", "factors": ["ckpt_opt"]}, {"peak_memory_gib": 12.0}),
        # no ckpt_opt, no provenance: k = 0
        result(TORCH, {"name": "d"}, {"peak_memory_gib": 40.0, "step_time_s": 1.0}),
        # a command runner with CHECKPOINT_OPTIMIZATION but no layer count: k cannot be told
        result(CUSTOM, {"name": "e", "env": {"CHECKPOINT_OPTIMIZATION": "true"}}, {"peak_memory_gib": 9.0}),
        result(CUSTOM, {"name": "d"}, {"peak_memory_gib": 11.0}),
        # a run without memory or step time says nothing
        result(CUSTOM, {"name": "d"}, {"throughput_tokens_per_s": 5.0}),
    ]
    with database.transaction() as session:
        batch = ResultsBatch.model_validate({"results": rows})
        return submit_results(session, batch, token_scope="admin", idempotency_key=None).run_ids


def test_k_and_memory_of_each_run(database: Database) -> None:
    ids = seed(database)
    with database.read() as session:
        got = checkpointing_advice(session, "img:1", "lab", "t")
    runs = {r.id: (r.ckpt_layers, r.peak_memory_gib) for r in got.runs}
    assert runs == {ids[0]: (4, 30.0), ids[1]: (8, 22.0), ids[2]: (16, 12.0), ids[3]: (0, 40.0)}
    assert got.device_memory_source == "cluster label memory_gib" and got.advice.device_memory_gib == 48.0
    assert got.shape_source == "torch-llm preset llama-1b" and got.shape.n_layers == 16
    # the in-house workload's runs are not of a similar shape (eager attention): not pooled
    assert got.similar_runs == ()


def test_runs_whose_k_cannot_be_told_are_listed(database: Database) -> None:
    ids = seed(database)
    with database.read() as session:
        got = checkpointing_advice(session, "img:1", "lab", "in-house", memory_gib=16)
    assert (
        got.shape_source == "runner_options" and got.shape.n_layers == 13 and got.shape.attention == "eager"
    )
    assert [r.id for r in got.runs] == [ids[5]]
    assert dict(got.skipped_runs) == {
        ids[4]: "its ckpt_layers is unknown (record ckpt_layers in its provenance)",
        ids[6]: "it has neither peak memory nor step time",
    }
    body = got.to_json()
    assert body["skipped_runs"] == [{"id": i, "reason": r} for i, r in got.skipped_runs]
    assert body["shape"]["attention"] == "eager" and body["basis"] == "measured"


def test_a_bad_memory_label_is_refused(database: Database) -> None:
    seed(database)
    with database.transaction() as session:
        catalog.get_named(session, Cluster, "lab").labels = {"memory_gib": "lots"}
    with database.read() as session, pytest.raises(ValidationProblem, match="memory_gib='lots'"):
        checkpointing_advice(session, "img:1", "lab", "t")


def test_the_cluster_definition_states_device_memory(database: Database) -> None:
    """Device memory belongs in the cluster definition (a label also selects Ray nodes, and so made
    the advisor's example unplaceable); it wins over a label, and the example plan states it."""
    seed(database)
    with database.transaction() as session:
        catalog.get_named(session, Cluster, "lab").device_memory_gib = 40.0
    with database.read() as session:
        got = checkpointing_advice(session, "img:1", "lab", "t")
    assert got.device_memory_source == "cluster lab definition" and got.advice.device_memory_gib == 40.0
    assert got.to_json()["device_memory_source"] == "cluster lab definition"
    plan = StudyPlan.model_validate(load_yaml(PLANS / "cpu-ckpt-sweep.yaml"))
    assert isinstance(plan.cluster, ClusterDef)
    assert plan.cluster.device_memory_gib == 1 and "memory_gib" not in plan.cluster.labels
