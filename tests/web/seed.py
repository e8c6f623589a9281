"""Real data for the dashboard tests, produced through the real paths: HTTP calls to the live server.

Two GPU releases (25.09 then 25.12) and one PPU release, the default five-rung ladder on two
workloads, four repeats per cell (4 vs 4 is the smallest design in which a Mann-Whitney test can
reach p < 0.05, so verdicts can be significant). 25.12 is faster overall but regresses on one cell,
one cell is deliberately noisy, and one run failed with an error and a log tail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from ablate.backend.db.database import Database
from ablate.backend.services import tokens

GPU_IMAGE = "training-nv-pytorch"
PPU_IMAGE = "training-xpu-pytorch"
OLD = f"{GPU_IMAGE}:25.09"
NEW = f"{GPU_IMAGE}:25.12"
PPU = f"{PPU_IMAGE}:26.01"
REPEATS = 4

LADDER = (
    ("Base", 0, []),
    ("Base+ACCL", 1, ["accl"]),
    ("AC2+ACCL", 2, ["accl", "ac2"]),
    ("AC2+ACCL+CompilerOpt", 3, ["accl", "ac2", "compiler_opt"]),
    ("AC2+ACCL+CompilerOpt+CkptOpt", 4, ["accl", "ac2", "compiler_opt", "ckpt_opt"]),
)
# Throughput of each rung relative to Base, per release.
GAIN = {
    OLD: (1.0, 1.04, 1.07, 1.15, 1.18),
    NEW: (1.0, 1.05, 1.08, 1.19, 1.22),
    PPU: (1.0, 1.03, 1.06, 1.12, 1.16),
}
MEMORY = (61.0, 61.5, 60.0, 58.0, 44.0)  # GiB; selective checkpointing saves memory
GPU_CLUSTER = {
    "name": "gpu-h200",
    "accelerator": "gpu",
    "device_model": "H200",
    "nodes": 2,
    "devices_per_node": 8,
    "interconnect": "RoCE",
    "resource_name": "GPU",
    "labels": {"pool": "gpu"},
}
PPU_CLUSTER = {
    "name": "ppu-zw",
    "accelerator": "ppu",
    "device_model": "PPU-ZW810",
    "nodes": 1,
    "devices_per_node": 16,
    "resource_name": "PPU",
    "labels": {"pool": "ppu"},
}
WORKLOADS = (
    {
        "name": "llama3-8b",
        "framework": "deepspeed",
        "model": "llama3-8b",
        "seq_len": 8192,
        "precision": "bf16",
    },
    {
        "name": "qwen2.5-7b",
        "framework": "megatron",
        "model": "qwen2.5-7b",
        "seq_len": 4096,
        "precision": "bf16",
    },
)
BASE_TPUT = {"llama3-8b": 400_000.0, "qwen2.5-7b": 520_000.0}
# The cell that regresses in 25.12 (10% slower than in 25.09), and the one that is noisy.
REGRESSED = ("qwen2.5-7b", "Base+ACCL")
NOISY = ("llama3-8b", "AC2+ACCL")
SERIES_STEPS = 120


@dataclass
class Seeded:
    admin_token: str
    run_ids: dict[str, list[int]] = field(default_factory=dict)  # release ref -> run ids
    failed_run_id: int | None = None
    series_run_id: int | None = None
    # Studies on a server without a dispatcher: their runs stay queued until cancelled.
    queued_study_id: int | None = None
    cancel_study_id: int | None = None


def make_token(database: Database, name: str, scope: str) -> str:
    """Tokens are bootstrapped in the database (the CLI's job); everything else goes over HTTP."""
    with database.transaction() as session:
        _, secret = tokens.create_token(session, name, scope)
    return secret


def _release(
    image: str, tag: str, platform: str, date: str, manifest: dict[str, str], issues: list[str]
) -> dict[str, Any]:
    return {
        "image": image,
        "tag": tag,
        "platform": platform,
        "release_date": date,
        "manifest": manifest,
        "driver_requirements": {"cuda_13.0.2": ">=580"} if platform == "gpu" else {"ppu_driver": ">=1.1.0"},
        "notes": {
            "features": [f"{image} {tag}: release notes feature"],
            "fixes": [],
            "known_issues": issues,
            "environment_rules": [],
        },
    }


RELEASES = (
    _release(
        GPU_IMAGE,
        "25.09",
        "gpu",
        "2025-09-20",
        {"torch": "2.8.0", "vllm": "0.10.1", "deepspeed": "0.17.2"},
        [],
    ),
    _release(
        GPU_IMAGE,
        "25.12",
        "gpu",
        "2025-12-18",
        {"torch": "2.9.0", "vllm": "0.12.0", "flashinfer-python": "0.5.3", "deepspeed": "0.17.2"},
        ["torch.compile may recompile on dynamic sequence lengths; pad to a multiple of 64."],
    ),
    _release(PPU_IMAGE, "26.01", "ppu", "2026-01-15", {"torch": "2.8.0", "vllm": "0.11.0"}, []),
)


def _series(rng: np.random.Generator, step_time: float) -> dict[str, Any]:
    steps = list(range(1, SERIES_STEPS + 1))
    times = (step_time * (1 + 0.02 * rng.standard_normal(SERIES_STEPS))).round(4)
    times[:3] *= 3  # warm-up steps are slow, as in real runs
    loss = 10.5 * np.exp(-np.arange(SERIES_STEPS) / 40) + 2.0 + 0.05 * rng.standard_normal(SERIES_STEPS)
    return {
        "step_time_s": {"steps": steps, "values": times.tolist()},
        "loss": {"steps": steps, "values": loss.round(4).tolist()},
    }


def _results(
    ref: str, cluster: dict[str, Any], workloads: tuple[dict[str, Any], ...], seed: int
) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for workload in workloads:
        for (name, position, factors), gain, memory in zip(LADDER, GAIN[ref], MEMORY, strict=True):
            factor = gain
            if ref == NEW and (workload["name"], name) == REGRESSED:
                factor = GAIN[OLD][position] * 0.90
            spread = 0.12 if (workload["name"], name) == NOISY else 0.004
            for repeat in range(REPEATS):
                tput = BASE_TPUT[workload["name"]] * factor * (1 + spread * rng.standard_normal())
                step_time = 8192 * 256 / tput
                result: dict[str, Any] = {
                    "release": ref,
                    "cluster": cluster,
                    "workload": workload,
                    "variant": {"name": name, "position": position, "factors": factors},
                    "repeat": repeat,
                    "metrics": {
                        "throughput_tokens_per_s": round(tput, 1),
                        "step_time_s": round(step_time, 4),
                        "peak_memory_gib": round(memory * (1 + 0.003 * rng.standard_normal()), 2),
                    },
                    "provenance": {"host": f"node-{repeat % 2}", "driver": "580.65", "ci_job": f"job-{seed}"},
                    "environment": {"NCCL_SOCKET_IFNAME": "eth0"}
                    | ({"CHECKPOINT_OPTIMIZATION": "true"} if "ckpt_opt" in factors else {}),
                    "started_at": "2026-01-20T10:00:00Z",
                    "finished_at": "2026-01-20T10:20:00Z",
                }
                if repeat == 0:
                    result["series"] = _series(rng, step_time)
                out.append(result)
    return out


def seed(api: str, database: Database) -> Seeded:
    """Create releases (admin) and submit every result (submit token) over HTTP."""
    data = Seeded(admin_token=make_token(database, "web-tests-admin", "admin"))
    submit = make_token(database, "web-tests-ci", "submit")
    with httpx.Client(base_url=api, timeout=60.0) as client:
        admin = {"Authorization": f"Bearer {data.admin_token}"}
        ci = {"Authorization": f"Bearer {submit}"}
        for release in RELEASES:
            response = client.post("/releases", json=release, headers=admin)
            assert response.status_code == 201, response.text
        batches = (
            (OLD, _results(OLD, GPU_CLUSTER, WORKLOADS, 1)),
            (NEW, _results(NEW, GPU_CLUSTER, WORKLOADS, 2)),
            (PPU, _results(PPU, PPU_CLUSTER, WORKLOADS[:1], 3)),
        )
        for ref, results in batches:
            response = client.post("/results", json={"results": results}, headers=ci)
            assert response.status_code == 201, response.text
            data.run_ids[ref] = response.json()["run_ids"]
        data.series_run_id = data.run_ids[NEW][0]
        failed = {
            "release": NEW,
            "cluster": GPU_CLUSTER["name"],
            "workload": WORKLOADS[0]["name"],
            "variant": LADDER[3][0],
            "repeat": REPEATS,
            "status": "failed",
            "error": "RuntimeError: CUDA error: an illegal memory access was encountered",
            "failure_kind": "benchmark",
            "log_tail": "step 40 loss 3.21\nstep 41 loss 3.20\nTraceback (most recent call last):\n"
            '  File "train.py", line 88, in <module>\nRuntimeError: CUDA error: an illegal memory access',
        }
        response = client.post("/results", json={"results": [failed]}, headers=ci)
        assert response.status_code == 201, response.text
        data.failed_run_id = response.json()["run_ids"][0]
        for name in ("nightly 25.12 check", "study to cancel"):
            plan = {
                "name": name,
                "release": NEW,
                "cluster": GPU_CLUSTER["name"],
                "variants": ["Base", "AC2+ACCL+CompilerOpt+CkptOpt"],
                "workloads": [w["name"] for w in WORKLOADS],
                "repeats": 2,
                "order_seed": 11,
            }
            response = client.post("/studies", json=plan, headers=admin)
            assert response.status_code == 201, response.text
            if data.queued_study_id is None:
                data.queued_study_id = response.json()["id"]
            else:
                data.cancel_study_id = response.json()["id"]
    return data
