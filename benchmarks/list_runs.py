"""Latency of ``GET /api/v1/runs`` with 100,000 runs stored, over real HTTP on PostgreSQL.

    python benchmarks/list_runs.py [--runs 100000] [--requests 200]

Creates a fresh PostgreSQL database (dropped afterwards), loads ``--runs`` runs with three summary
metrics each by ``COPY`` (spread over 4 releases, 5 variants, 4 workloads, 2 clusters; 2% failed),
starts ``ablate serve`` in a subprocess and times ``--requests`` sequential requests per query
shape on one keep-alive connection. Prints p50/p95/max per shape (the aim: p95 under 50 ms).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _db import RUN_COLUMNS, conninfo, copy_rows, fresh_database, set_run_sequence
from ingest import server

RELEASES = [
    ("training-nv-pytorch", "25.10"),
    ("training-nv-pytorch", "25.12"),
    ("training-xpu-pytorch", "25.01"),
    ("training-xpu-pytorch", "26.01"),
]
VARIANTS = ["Base", "Base+ACCL", "AC2+ACCL", "AC2+ACCL+CompilerOpt", "AC2+ACCL+CompilerOpt+CkptOpt"]
WORKLOADS = ["deepspeed/llama3-8b", "megatron/llama3-70b", "torch-llm/tiny", "deepspeed/qwen2-7b"]
CLUSTERS = [("h200-2x8", "gpu"), ("ppu-1x16", "ppu")]


def load(url: str, n: int) -> None:
    rng = random.Random(0)
    now = datetime.now(UTC)
    with psycopg.connect(conninfo(url)) as conn:
        for image, tag in RELEASES:
            conn.execute(
                "INSERT INTO releases (image, tag, platform, manifest, driver_requirements, notes, "
                "created_at) VALUES (%s, %s, %s, '{}', '{}', '{}', %s)",
                (image, tag, "gpu" if "nv" in image else "ppu", now),
            )
        for i, name in enumerate(VARIANTS):
            conn.execute(
                "INSERT INTO variants (name, position, factors, env, runner_options, created_at) "
                "VALUES (%s, %s, '[]', '{}', '{}', %s)",
                (name, i, now),
            )
        for name in WORKLOADS:
            conn.execute(
                "INSERT INTO workloads (name, data_parallel, tensor_parallel, pipeline_parallel, "
                "warmup_steps, runner_options, created_at) VALUES (%s, 1, 1, 1, 0, '{}', %s)",
                (name, now),
            )
        for name, acc in CLUSTERS:
            conn.execute(
                "INSERT INTO clusters (name, accelerator, nodes, devices_per_node, labels, created_at) "
                "VALUES (%s, %s, 1, 8, '{}', %s)",
                (name, acc, now),
            )
        copy_rows(conn, "runs", RUN_COLUMNS, _runs(rng, n, now))
        copy_rows(conn, "run_metrics", "run_id, name, value, unit", _metrics(rng, n))
        set_run_sequence(conn, n)
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")


def _runs(rng: random.Random, n: int, now: datetime) -> Iterator[tuple[object, ...]]:
    for i in range(1, n + 1):
        status = "failed" if rng.random() < 0.02 else "succeeded"
        source = "ci" if i % 2 else "scheduled"
        ids = (rng.randint(1, 4), rng.randint(1, 2), rng.randint(1, 4), rng.randint(1, 5))
        host = json.dumps({"host": f"node-{i % 64}"})
        yield (i, *ids, i % 5, status, 1, source, i, now, now, now, now, host, "{}")


def _metrics(rng: random.Random, n: int) -> Iterator[tuple[object, ...]]:
    for i in range(1, n + 1):
        yield (i, "throughput_tokens_per_s", 4e5 + rng.random() * 1e4, "tokens/s")
        yield (i, "step_time_s", 5 + rng.random(), "s")
        yield (i, "peak_memory_gib", 60 + rng.random(), "GiB")


def shapes(runs: int) -> dict[str, dict[str, str | int]]:
    """The query shapes timed, by label: the parameters of ``GET /api/v1/runs``."""
    return {
        "newest 50": {},
        "page deep in the middle": {"cursor": _cursor(runs // 2)},
        "release": {"release": "training-nv-pytorch:25.12"},
        "release+variant+workload": {
            "release": "training-xpu-pytorch:26.01",
            "variant": "AC2+ACCL",
            "workload": "deepspeed/qwen2-7b",
        },
        "status=failed (2%)": {"status": "failed"},
        "cluster+source": {"cluster": "ppu-1x16", "source": "ci"},
        "limit 500": {"limit": 500},
    }


def measure(base: str, runs: int, requests: int) -> dict[str, list[float]]:
    """Sorted latencies in ms of ``requests`` sequential requests per shape, on one keep-alive connection."""
    out: dict[str, list[float]] = {}
    with httpx.Client(base_url=f"{base}/api/v1", timeout=30) as client:
        middle = client.get("/runs", params={"limit": 1, "cursor": _cursor(runs // 2)}).json()
        assert middle["items"], middle
        for label, params in shapes(runs).items():
            client.get("/runs", params=params)  # warm
            times = []
            for _ in range(requests):
                t = time.perf_counter()
                r = client.get("/runs", params=params)
                times.append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
            out[label] = sorted(times)
    return out


def p95(times: list[float]) -> float:
    """The 95th percentile of sorted latencies (the same rank as the figures in benchmarks/README.md)."""
    return times[max(0, int(0.95 * len(times)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    with fresh_database() as url:
        t = time.perf_counter()
        load(url, args.runs)
        print(f"loaded {args.runs:,} runs (+{3 * args.runs:,} metrics) in {time.perf_counter() - t:.1f} s")
        with server(url) as base:
            timed = measure(base, args.runs, args.requests)
        print(f"{'query':28} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
        for label, times in timed.items():
            print(f"{label:28} {statistics.median(times):8.1f} {p95(times):8.1f} {times[-1]:8.1f}")


def _cursor(before: int) -> str:
    from ablate.backend.services.runs import encode_cursor

    return encode_cursor(before)


if __name__ == "__main__":
    main()
