"""Payload builders and database snapshots shared by the API tests."""

from __future__ import annotations

import copy
from typing import Any

import httpx
from sqlalchemy import func, select

from ablate.backend.db.database import Database
from ablate.backend.db.models import (
    ApiToken,
    Cluster,
    Release,
    Run,
    RunMetric,
    RunSeries,
    Study,
    Variant,
    Workload,
)

RELEASE = {
    "image": "training-nv-pytorch",
    "tag": "25.12",
    "platform": "gpu",
    "release_date": "2025-12-15",
    "manifest": {"torch": "2.9.0", "vllm": "0.12.0"},
    "driver_requirements": {"cuda_13.0": {"driver": ">=580"}},
    "notes": {"features": ["vLLM 0.12.0"], "fixes": [], "known_issues": [], "environment_rules": []},
}
REF = "training-nv-pytorch:25.12"
CLUSTER = {
    "name": "h200-2x8",
    "accelerator": "gpu",
    "device_model": "H200",
    "nodes": 2,
    "devices_per_node": 8,
}
WORKLOAD = {
    "name": "deepspeed/llama3-8b",
    "framework": "deepspeed",
    "model": "llama3-8b",
    "seq_len": 8192,
    "global_batch": 256,
    "precision": "bf16",
}
VARIANT = {"name": "AC2+ACCL+CompilerOpt", "factors": ["accl", "ac2", "compiler_opt"]}


def result(**overrides: Any) -> dict[str, Any]:
    """The contract's example result, with overrides (no repeat: the server numbers the cell's results)."""
    base: dict[str, Any] = {
        "release": REF,
        "cluster": copy.deepcopy(CLUSTER),
        "workload": copy.deepcopy(WORKLOAD),
        "variant": copy.deepcopy(VARIANT),
        "metrics": {"throughput_tokens_per_s": 412345.0, "step_time_s": 5.08, "peak_memory_gib": 61.2},
        "series": {"step_time_s": {"steps": [1, 2, 3], "values": [5.3, 5.1, 5.08]}},
        "provenance": {"host": "node-17", "driver": "580.65", "torch": "2.9.0"},
        "started_at": "2026-12-01T10:00:00Z",
        "finished_at": "2026-12-01T10:20:00Z",
    }
    base.update(overrides)
    return base


def create_release(admin: httpx.Client, **overrides: Any) -> dict[str, Any]:
    response = admin.post("/releases", json={**RELEASE, **overrides})
    assert response.status_code == 201, response.text
    return response.json()


MODELS = (Release, Variant, Workload, Cluster, Study, Run, RunMetric, RunSeries, ApiToken)


def snapshot(database: Database) -> dict[str, Any]:
    """Row counts and the latest update stamp of every table: 'nothing added or changed'."""
    with database.read() as session:
        counts = {m.__tablename__: session.scalar(select(func.count()).select_from(m)) for m in MODELS}
        counts["runs.updated_at"] = session.scalar(select(func.max(Run.updated_at)))
        counts["releases.notes"] = [r.notes for r in session.scalars(select(Release).order_by(Release.id))]
    return counts


def assert_problem(response: httpx.Response, status: int, *, loc: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body = response.json()
    assert {"type", "title", "status", "detail", "errors"} <= set(body), body
    assert body["status"] == status
    assert "Traceback" not in response.text
    if loc is not None:
        locs = [e["loc"] for e in body["errors"]]
        assert loc in locs, (loc, body)
    return body
