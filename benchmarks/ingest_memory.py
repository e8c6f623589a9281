"""Peak memory of the server while it ingests concurrent large result batches.

    python benchmarks/ingest_memory.py [--clients 8] [--mib 10] [--reps 3] [--database sqlite|postgresql]

Starts ``ablate serve`` in its own process on a fresh database, sends one small batch (warm-up:
imports, pools, first-request caches), reads the server's resident memory, then sends ``--clients``
bodies of about ``--mib`` MiB each (results with long step series, the shape that makes bodies
large) at the same time, sampling the server's RSS every 2 ms until every answer is in. Prints the
peak growth over the warm baseline, per request and as a multiple of the body size (the aim: at
most ~3x). Each repetition uses a fresh server and database.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
from _db import fresh_database
from _serve import free_port, wait_ready

from ablate.backend.db.database import Database
from ablate.backend.schemas.catalog import ClusterDef, ReleaseCreate, VariantDef, WorkloadDef
from ablate.backend.services import catalog, tokens

ABLATE = str(Path(sys.executable).with_name("ablate"))
RELEASE = "training-nv-pytorch:25.12"
MIB = 1024 * 1024


@contextmanager
def server(url: str, max_body: int) -> Iterator[tuple[str, psutil.Process]]:
    port = free_port()
    env = {
        **os.environ,
        "ABLATE_DATABASE_URL": url,
        "ABLATE_PORT": str(port),
        "ABLATE_LOG_LEVEL": "warning",
        "ABLATE_MAX_BODY_BYTES": str(max_body),
    }
    proc = subprocess.Popen([ABLATE, "serve", "--no-dispatcher"], env=env, stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, base, 60)
        yield base, psutil.Process(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def seed(url: str) -> str:
    db = Database.from_url(url)
    with db.transaction() as s:
        catalog.create_release(s, ReleaseCreate(image="training-nv-pytorch", tag="25.12", platform="gpu"))
        from ablate.backend.db.models import Cluster, Variant, Workload

        catalog.create_named(s, Cluster, ClusterDef(name="h200-2x8", accelerator="gpu", nodes=2))
        catalog.create_named(s, Workload, WorkloadDef(name="deepspeed/llama3-8b"))
        catalog.create_named(s, Variant, VariantDef(name="Base"))
        _, secret = tokens.create_token(s, "bench", "submit")
    db.dispose()
    return secret


def body(index: int, target_bytes: int) -> bytes:
    """A batch of 10 results whose step series make the body about ``target_bytes`` long."""
    rng = np.random.default_rng(index)
    results: list[dict[str, Any]] = []
    per_point = 17  # bytes of '12345, ' and '5.012345, ' in the encoded JSON
    points = max(10, target_bytes // (10 * per_point))
    steps = list(range(1, points + 1))
    for i in range(10):
        values = (5.0 + 0.05 * rng.standard_normal(points)).round(6).tolist()
        results.append(
            {
                "release": RELEASE,
                "cluster": "h200-2x8",
                "workload": "deepspeed/llama3-8b",
                "variant": "Base",
                "repeat": index * 10 + i,
                "metrics": {"throughput_tokens_per_s": 412345.0 + i, "step_time_s": 5.08},
                "series": {"step_time_s": {"steps": steps, "values": values}},
            }
        )
    return json.dumps({"results": results}).encode()


def rss(process: psutil.Process) -> int:
    return int(process.memory_info().rss)


def one_rep(kind: str, clients: int, size: int) -> dict[str, float]:
    bodies = [body(i + 1, size) for i in range(clients)]
    with fresh_database(kind) as url:
        secret = seed(url)
        with server(url, max_body=4 * size) as (base, process):
            headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
            with httpx.Client(base_url=base, headers=headers, timeout=600) as client:
                assert client.post("/api/v1/results", content=body(0, 100_000)).status_code == 201
            time.sleep(0.5)
            baseline = rss(process)
            peak = baseline
            done = threading.Event()

            def sample() -> None:
                nonlocal peak
                while not done.is_set():
                    peak = max(peak, rss(process))
                    time.sleep(0.002)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            start = time.perf_counter()

            def send(payload: bytes) -> int:
                with httpx.Client(base_url=base, headers=headers, timeout=600) as c:
                    return c.post("/api/v1/results", content=payload).status_code

            with ThreadPoolExecutor(clients) as pool:
                statuses = list(pool.map(send, bodies))
            wall = time.perf_counter() - start
            done.set()
            sampler.join()
            assert statuses == [201] * clients, statuses
    mean_body = statistics.mean(len(b) for b in bodies)
    growth = peak - baseline
    return {
        "body_mib": mean_body / MIB,
        "baseline_mib": baseline / MIB,
        "peak_mib": peak / MIB,
        "growth_mib": growth / MIB,
        "per_request_x": growth / clients / mean_body,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--mib", type=float, default=10.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="postgresql")
    args = parser.parse_args()
    rows = []
    for rep in range(args.reps):
        row = one_rep(args.database, args.clients, int(args.mib * MIB))
        rows.append(row)
        print(
            f"rep {rep + 1}: {args.clients} x {row['body_mib']:.1f} MiB bodies: "
            f"RSS {row['baseline_mib']:.0f} -> {row['peak_mib']:.0f} MiB (+{row['growth_mib']:.0f} MiB), "
            f"{row['per_request_x']:.2f}x the body per request, {row['wall_s']:.1f} s",
            flush=True,
        )
    med = statistics.median(r["per_request_x"] for r in rows)
    growth = statistics.median(r["growth_mib"] for r in rows)
    print(f"median: +{growth:.0f} MiB for {args.clients} concurrent bodies, {med:.2f}x the body per request")


if __name__ == "__main__":
    main()
