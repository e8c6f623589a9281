"""Mixed load against a real ``ablate serve`` on PostgreSQL: one worker process against several.

    python benchmarks/load.py [--clients 50] [--seconds 15] [--workers 1 2] [--seed-runs 160]

For each ``--workers`` value: a fresh PostgreSQL database (dropped afterwards), two releases of one
image seeded through ``POST /api/v1/results`` (not timed), then ``ablate serve --workers N
--no-dispatcher`` in its own process and ``--clients`` concurrent clients for ``--seconds``, each
sending a fixed, seeded mix of

- ``ingest``: ``POST /api/v1/results``, one result with a 200-point series (a new run each time, so
  the release's kept comparison is invalidated as in a busy CI hour);
- ``api``: the release's comparison, a page of runs, the study list (``/api/v1/...``);
- ``page``: dashboard pages (home, the release, the runs list);
- ``probe``: ``/healthz``, the cheapest answer: the floor, and what a slow page holding the only
  process costs everything else.

Prints, per worker count and kind, the number of requests, errors (transport errors and answers
other than 2xx) and latency p50 / p95 / p99 in milliseconds, then each kind's p99 with several
workers as a ratio of the one-worker p99 and of the same run's probe p50 (the floor). Both server
configurations run on the same machine one after the other; compare them only within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from _db import fresh_database
from ingest import count_startups

from ablate.backend.db.database import Database
from ablate.backend.db.models import Cluster, Variant, Workload
from ablate.backend.schemas.catalog import ClusterDef, ReleaseCreate, VariantDef, WorkloadDef
from ablate.backend.services import catalog, tokens

ABLATE = str(Path(sys.executable).with_name("ablate"))
IMAGE = "training-nv-pytorch"
RELEASES = ("25.11", "25.12")
VARIANTS = ("Base", "FP8", "FlashAttention", "Compile")
WORKLOADS = tuple(f"deepspeed/model-{i}" for i in range(10))
KINDS = ("ingest", "api", "page", "probe")
WEIGHTS = (3, 3, 3, 1)  # of every 10 requests a client sends
READS = {
    "api": (
        f"/api/v1/releases/{IMAGE}:25.12/comparison",
        f"/api/v1/runs?release={IMAGE}:25.12&limit=50",
        "/api/v1/studies",
    ),
    "page": ("/", f"/releases/{IMAGE}:25.12", "/runs"),
    "probe": ("/healthz",),
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(url: str, workers: int) -> Iterator[str]:
    """``ablate serve --workers N --no-dispatcher`` in its own process, once every worker started."""
    port = _free_port()
    env = {**os.environ, "ABLATE_DATABASE_URL": url, "ABLATE_PORT": str(port), "ABLATE_LOG_LEVEL": "info"}
    command = [ABLATE, "serve", "--workers", str(workers), "--no-dispatcher", "--host", "127.0.0.1"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started = count_startups(proc)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        # Every worker up: one still importing would leave its share to the others and the clock count it.
        while not (_ready(base) and started() >= workers):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ablate serve --workers {workers} did not start")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def seed(url: str) -> str:
    """The catalog and an admin token (directly); returns the token's secret."""
    db = Database.from_url(url)
    with db.transaction() as s:
        for tag in RELEASES:
            catalog.create_release(s, ReleaseCreate(image=IMAGE, tag=tag, platform="gpu"))
        catalog.create_named(
            s, Cluster, ClusterDef(name="h200-2x8", accelerator="gpu", nodes=2, devices_per_node=8)
        )
        for w in WORKLOADS:
            catalog.create_named(s, Workload, WorkloadDef(name=w))
        for v in VARIANTS:
            catalog.create_named(s, Variant, VariantDef(name=v))
        _, secret = tokens.create_token(s, "load", "admin")
    db.dispose()
    return secret


def result(tag: str, variant: str, workload: str, repeat: int, rng: random.Random) -> dict[str, Any]:
    speed = 400_000.0 * (1.0 + 0.05 * VARIANTS.index(variant)) * (1.02 if tag == "25.12" else 1.0)
    step = 5.0 + 0.05 * rng.random()
    return {
        "release": f"{IMAGE}:{tag}",
        "cluster": "h200-2x8",
        "workload": workload,
        "variant": variant,
        "repeat": repeat,
        "metrics": {
            "throughput_tokens_per_s": speed * (1 + 0.01 * rng.gauss(0, 1)),
            "step_time_s": step,
            "peak_memory_gib": 61.2,
        },
        "series": {"step_time_s": {"steps": list(range(1, 201)), "values": [step] * 200}},
        "started_at": "2026-12-01T10:00:00Z",
        "finished_at": "2026-12-01T10:20:00Z",
    }


def seed_runs(base: str, secret: str, n: int) -> None:
    """``n`` runs over both releases through the API (not timed): what the pages and comparison read."""
    rng = random.Random(0)
    cells = [(t, v, w) for t in RELEASES for v in VARIANTS for w in WORKLOADS]
    results = [result(*cells[i % len(cells)], i // len(cells), rng) for i in range(n)]
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=300) as c:
        for i in range(0, n, 40):
            r = c.post("/api/v1/results", json={"results": results[i : i + 40]})
            if r.status_code != 201:
                raise RuntimeError(f"seeding: {r.status_code} {r.text[:300]}")
        for paths in READS.values():  # warm: the first reader of each pays imports and caches
            for path in paths:
                c.get(path).raise_for_status()


# The first answer of each failing (kind, status), shown after the table (dict.setdefault is atomic).
FIRST_ERROR: dict[tuple[str, int], str] = {}

Sample = tuple[str, float, int]  # kind, seconds, HTTP status (0: a transport error)


def client(base: str, secret: str, index: int, until: float) -> list[Sample]:
    """One client: requests back to back in a seeded mix until ``until``."""
    rng = random.Random(index)
    samples: list[Sample] = []
    headers = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(base_url=base, headers=headers, timeout=120) as c:
        n = 0
        while time.monotonic() < until:
            kind = rng.choices(KINDS, WEIGHTS)[0]
            start = time.perf_counter()
            try:
                if kind == "ingest":
                    body = result("25.12", rng.choice(VARIANTS), rng.choice(WORKLOADS), 0, rng)
                    body["provenance"] = {"client": index}
                    del body["repeat"]  # the server gives the next free one (clients share cells)
                    r = c.post(
                        "/api/v1/results",
                        content=json.dumps({"results": [body]}),
                        headers={"Content-Type": "application/json", "Idempotency-Key": f"load-{index}-{n}"},
                    )
                else:
                    r = c.get(rng.choice(READS[kind]))
                status = r.status_code
                if not _ok(status):
                    FIRST_ERROR.setdefault((kind, status), r.text[:300])
            except httpx.HTTPError as exc:
                status = 0
                FIRST_ERROR.setdefault((kind, 0), repr(exc)[:300])
            samples.append((kind, time.perf_counter() - start, status))
            n += 1
    return samples


def _ok(status: int) -> bool:
    return 200 <= status < 300


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(workers: int, clients: int, seconds: float, n_seed: int) -> dict[str, dict[str, float]]:
    with fresh_database() as url:
        secret = seed(url)
        with serve(url, workers) as base:
            seed_runs(base, secret, n_seed)
            until = time.monotonic() + seconds
            with ThreadPoolExecutor(clients) as pool:
                parts = list(pool.map(lambda i: client(base, secret, i, until), range(clients)))
    by_kind: dict[str, list[Sample]] = defaultdict(list)
    for part in parts:
        for sample in part:
            by_kind[sample[0]].append(sample)
    table: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        got = by_kind.get(kind, [])
        ms = [s[1] * 1000 for s in got] or [float("nan")]
        table[kind] = {
            "n": len(got),
            "errors": sum(not _ok(s[2]) for s in got),
            "p50": statistics.median(ms),
            "p95": percentile(ms, 0.95),
            "p99": percentile(ms, 0.99),
        }
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=15.0, help="load per worker count")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seed-runs", type=int, default=160)
    args = parser.parse_args()
    tables = {w: measure(w, args.clients, args.seconds, args.seed_runs) for w in args.workers}
    print(f"{args.clients} clients, {args.seconds:g} s each, {os.cpu_count()} CPUs; latency in ms")
    print(f"{'workers':>7} {'kind':>7} {'requests':>8} {'errors':>6} {'p50':>8} {'p95':>8} {'p99':>8}")
    for w, table in tables.items():
        for kind, row in table.items():
            print(
                f"{w:>7} {kind:>7} {row['n']:>8.0f} {row['errors']:>6.0f} "
                f"{row['p50']:>8.0f} {row['p95']:>8.0f} {row['p99']:>8.0f}"
            )
    first = args.workers[0]
    for w in args.workers[1:]:
        ratios = ", ".join(
            f"{k} {tables[w][k]['p99'] / tables[first][k]['p99']:.2f}"
            for k in KINDS
            if tables[first][k]["p99"]
        )
        print(f"p99 with {w} workers / with {first}: {ratios}")
    for (kind, status), text in sorted(FIRST_ERROR.items()):
        print(f"error {kind} {status or 'transport'}: {text}")
    for w, table in tables.items():
        floor = table["probe"]["p50"]
        ratios = ", ".join(f"{k} {table[k]['p99'] / floor:.0f}" for k in KINDS if floor)
        print(f"p99 / probe p50 (the floor), {w} worker(s): {ratios}")


if __name__ == "__main__":
    main()
