"""Known data written through the real ingest path (``submit_results``), for comparison and report tests.

Values are products of small fixed factors, so every expected number can be recomputed directly
from :data:`LADDER`, :data:`NOISE` and the per-release changes, without touching the service.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ablate.backend.db.database import Database
from ablate.backend.schemas.results import ResultsBatch
from ablate.backend.services.ingest import submit_results

IMAGE = "training-nv-pytorch"
CLUSTER = {
    "name": "h200-2x8",
    "accelerator": "gpu",
    "device_model": "H200",
    "nodes": 2,
    "devices_per_node": 8,
}
# name, position, factors, throughput multiplier over Base, peak memory (GiB)
LADDER: tuple[tuple[str, int, list[str], float, float], ...] = (
    ("Base", 1, [], 1.00, 61.0),
    ("Base+ACCL", 2, ["accl"], 1.06, 61.0),
    ("AC2+ACCL", 3, ["ac2", "accl"], 1.09, 60.0),
    ("AC2+ACCL+CompilerOpt", 4, ["ac2", "accl", "compiler_opt"], 1.31, 58.0),
    ("AC2+ACCL+CompilerOpt+CkptOpt", 5, ["ac2", "accl", "ckpt_opt", "compiler_opt"], 1.28, 41.0),
)
VARIANTS = [name for name, *_ in LADDER]
WORKLOADS: dict[str, float] = {"deepspeed/llama3-8b": 10_000.0, "megatron/qwen2-7b": 12_000.0}
NOISE: tuple[float, ...] = (0.99, 1.0, 1.01, 0.995, 1.005)


@dataclass
class ReleaseSpec:
    tag: str
    manifest: dict[str, str]
    # (workload, variant) -> multiplier applied to this release's throughput (e.g. 0.92 = -8%)
    change: dict[tuple[str, str], float] = field(default_factory=dict)
    repeats: int = 5
    release_date: str | None = None
    known_issues: list[str] = field(default_factory=list)
    skip: set[tuple[str, str]] = field(default_factory=set)  # cells not run at all
    failed: dict[tuple[str, str], int] = field(default_factory=dict)  # cell -> number of failed runs
    repeats_of: dict[tuple[str, str], int] = field(default_factory=dict)  # cell -> repeats override
    workloads: Sequence[str] = tuple(WORKLOADS)
    image: str = IMAGE


def throughput(spec: ReleaseSpec, workload: str, variant: str, repeat: int) -> float:
    mult = next(m for n, _p, _f, m, _mem in LADDER if n == variant)
    return WORKLOADS[workload] * mult * spec.change.get((workload, variant), 1.0) * NOISE[repeat % len(NOISE)]


def memory(workload: str, variant: str, repeat: int) -> float:
    mem = next(m for n, _p, _f, _t, m in LADDER if n == variant)
    return mem + (0.1 * (repeat % 3)) + (2.0 if workload.startswith("megatron") else 0.0)


def expected_values(spec: ReleaseSpec, workload: str, variant: str) -> list[float]:
    """Throughputs of the succeeded runs of one cell, as seeded."""
    n = spec.repeats_of.get((workload, variant), spec.repeats)
    if (workload, variant) in spec.skip:
        return []
    return [throughput(spec, workload, variant, r) for r in range(n)]


def _result(spec: ReleaseSpec, workload: str, variant: str, repeat: int, *, status: str) -> dict[str, Any]:
    name, position, factors, _t, _m = next(x for x in LADDER if x[0] == variant)
    out: dict[str, Any] = {
        "release": {
            "image": spec.image,
            "tag": spec.tag,
            "platform": "gpu",
            "manifest": spec.manifest,
            "release_date": spec.release_date,
            "notes": {"features": [f"release {spec.tag}"], "known_issues": spec.known_issues},
        },
        "cluster": CLUSTER,
        "workload": {"name": workload, "framework": workload.split("/")[0], "model": workload.split("/")[1]},
        "variant": {"name": name, "position": position, "factors": factors},
        "repeat": repeat,
        "status": status,
        "provenance": {"image_digest": f"sha256:{spec.tag}-{position}", "host": f"node-{repeat % 2}"},
        "environment": {
            "NCCL_SOCKET_IFNAME": "eth0",
            **({"CHECKPOINT_OPTIMIZATION": "true"} if "ckpt_opt" in factors else {}),
        },
    }
    if status == "succeeded":
        tput = throughput(spec, workload, variant, repeat)
        out["metrics"] = {
            "throughput_tokens_per_s": tput,
            "peak_memory_gib": memory(workload, variant, repeat),
            "step_time_s": {"value": 8192 * 64 / tput, "unit": "s"},
        }
    else:
        out["error"] = "NCCL timeout after 1800 s\nstack..."
        out["failure_kind"] = "infrastructure"
    return out


def seed_release(database: Database, spec: ReleaseSpec, *, reverse: bool = False) -> None:
    """All runs of ``spec`` in one CI batch; ``reverse`` stores them in the opposite order."""
    results = []
    for workload in spec.workloads:
        for variant in VARIANTS:
            cell = (workload, variant)
            if cell in spec.skip:
                continue
            n = spec.repeats_of.get(cell, spec.repeats)
            results += [_result(spec, workload, variant, r, status="succeeded") for r in range(n)]
            results += [
                _result(spec, workload, variant, n + i, status="failed")
                for i in range(spec.failed.get(cell, 0))
            ]
    if not results:
        raise ValueError("a batch needs at least one result: use seed_empty_release")
    if reverse:
        results.reverse()
    with database.transaction() as session:
        submit_results(
            session,
            ResultsBatch.model_validate({"results": results}),
            token_scope="admin",
            idempotency_key=None,
        )


def seed_empty_release(database: Database, tag: str, manifest: Mapping[str, str]) -> None:
    from ablate.backend.schemas.catalog import ReleaseCreate
    from ablate.backend.services import catalog

    with database.transaction() as session:
        catalog.create_release(
            session, ReleaseCreate(image=IMAGE, tag=tag, platform="gpu", manifest=dict(manifest))
        )


REL_2510 = ReleaseSpec("25.10", {"torch": "2.8.0", "vllm": "0.10.2", "flashinfer-python": "0.4.1"})
REL_2511 = ReleaseSpec(
    "25.11",
    {"torch": "2.8.0", "vllm": "0.11.0", "flashinfer-python": "0.5.0", "apex": "0.1"},
    change={("megatron/qwen2-7b", "Base"): 1.01},
)
# 25.12: the last rung of llama3 regresses by 8%; Base+ACCL on qwen2 improves by 5%.
REL_2512 = ReleaseSpec(
    "25.12",
    {"torch": "2.8.0", "vllm": "0.12.0", "flashinfer-python": "0.5.3", "accl": "2.3.1"},
    change={
        ("deepspeed/llama3-8b", "AC2+ACCL+CompilerOpt+CkptOpt"): 0.92,
        ("megatron/qwen2-7b", "Base+ACCL"): 1.05,
    },
    known_issues=["torch.compile may recompile on dynamic shapes with vLLM 0.12.0"],
)


def seed_standard(database: Database) -> None:
    for spec in (REL_2510, REL_2511, REL_2512):
        seed_release(database, spec)
