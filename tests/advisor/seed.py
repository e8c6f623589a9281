"""Runs for the advisor, written through the real ingest path (``submit_results``).

A ckpt_layers sweep of one workload on an H200 cluster whose peak memory falls by a fixed number of
GiB per checkpointed layer and whose step time rises by a fixed fraction per layer, so that every
expectation can be recomputed from :func:`peak` and :func:`step_time`.
"""

from __future__ import annotations

from typing import Any

from ablate.backend.db.database import Database
from ablate.backend.schemas.results import ResultsBatch
from ablate.backend.services.ingest import submit_results

RELEASE = "training-nv-pytorch:25.12"
OLDER = "training-nv-pytorch:25.11"
CLUSTER = {
    "name": "h200-1x8",
    "accelerator": "gpu",
    "device_model": "H200",
    "nodes": 1,
    "devices_per_node": 8,
}
UNKNOWN_DEVICE = {
    "name": "mystery-1x8",
    "accelerator": "gpu",
    "device_model": "X9",
    "nodes": 1,
    "devices_per_node": 8,
}
WORKLOAD = {
    "name": "torch-llm-llama-1b",
    "model": "llama-1b",
    "seq_len": 4096,
    "micro_batch": 4,
    "precision": "bf16",
    "zero_stage": 1,
    "runner": "torch-llm",
}
SIMILAR = {**WORKLOAD, "name": "torch-llm-llama-1b-mb2", "micro_batch": 2}
UNRUN = {**WORKLOAD, "name": "torch-llm-llama-1b-mb3", "micro_batch": 3}
NO_LAYERS = {"name": "ljperf-mystery", "model": "deepspeed/mystery", "runner": "command", "seq_len": 4096}
SWEEP = (0, 2, 4, 8, 16)
NOISE = (1.0, 1.004, 0.996)


def peak(k: int, repeat: int, micro_batch: int = 4) -> float:
    # The layer being recomputed holds its activations again: k = 15 and k = 16 peak alike, as
    # measured (docs/advisor.md) and as the model says.
    return (40.0 + 2.5 * max(16 - k, 1) * micro_batch / 4) * NOISE[repeat % 3]


def step_time(k: int, repeat: int) -> float:
    return 1.2 * (1 + 0.02 * k) * NOISE[(repeat + 1) % 3]


def _result(workload: dict[str, Any], k: int, repeat: int, release: str = RELEASE) -> dict[str, Any]:
    factors = ["ckpt_opt"] if k else []
    variant = {"name": f"Base ckpt_layers={k}", "factors": factors, "runner_options": {"ckpt_layers": k}}
    if k:
        variant["env"] = {"CHECKPOINT_OPTIMIZATION": "true"}
    return {
        "release": release,
        "cluster": dict(CLUSTER),
        "workload": dict(workload),
        "variant": variant,
        "repeat": repeat,
        "metrics": {
            "peak_memory_gib": peak(k, repeat, int(workload.get("micro_batch", 4))),
            "step_time_s": step_time(k, repeat),
            "throughput_tokens_per_s": 1000.0 / step_time(k, repeat),
        },
        "provenance": {"ckpt_layers": str(k), "runner": "torch-llm"},
    }


def seed(database: Database) -> dict[str, list[int]]:
    """The sweep of WORKLOAD (3 repeats), one of SIMILAR (2 repeats), and catalog entries only for
    UNRUN, NO_LAYERS and the cluster of unknown memory. Returns the run ids by workload name."""
    releases = [
        {"image": ref.split(":")[0], "tag": ref.split(":")[1], "platform": "gpu"} for ref in (RELEASE, OLDER)
    ]
    main = [_result(WORKLOAD, k, r) for k in SWEEP for r in range(3)]
    main[0]["release"] = releases[0]  # defines both releases on first sight (admin scope)
    older = [_result(WORKLOAD, 0, 0, OLDER)]
    older[0]["release"] = releases[1]
    similar = [_result(SIMILAR, k, r) for k in (0, 8, 16) for r in range(2)]
    extra = [
        {**_result(UNRUN, 0, 0), "status": "failed", "metrics": {}, "error": "never ran"},
        {**_result(NO_LAYERS, 0, 0), "provenance": {}},
        {**_result(WORKLOAD, 0, 0), "cluster": dict(UNKNOWN_DEVICE)},
    ]
    batch = ResultsBatch.model_validate({"results": [*main, *older, *similar, *extra]})
    with database.transaction() as session:
        ids = submit_results(session, batch, token_scope="admin", idempotency_key=None).run_ids
    n1, n2, n3 = len(main), len(older), len(similar)
    return {"main": ids[:n1], "older": ids[n1 : n1 + n2], "similar": ids[n1 + n2 : n1 + n2 + n3]}
