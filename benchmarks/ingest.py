"""Result ingest over real HTTP against a bare psycopg ``COPY`` of the same rows, interleaved.

    python benchmarks/ingest.py [--results 200] [--points 5000] [--batch 10] [--clients 4] [--workers 1]
                                [--reps 3] [--pair 20]

Creates a fresh PostgreSQL database per repetition (dropped afterwards), starts ``ablate serve`` on
it in a subprocess (``--workers`` > 1: uvicorn's worker processes on the app factory, as
docs/deployment.md runs the API), and writes ``--results`` results, each with a ``--points``-point
step series and three summary metrics, twice into that one database: as ``POST /api/v1/results``
batches of ``--batch`` results from ``--clients`` concurrent clients, and with psycopg ``COPY`` of
the same rows (runs, run_metrics, run_series with the packed blobs, packing included, from the
decoded values; under a variant of its own, as a CI result is one cell and repeat) committing every
``--batch`` results as the service commits each request before it answers. The two sides take turns
in pairs: ``--pair`` results written by one side, then the same results by the other, which one goes
first alternating from pair to pair, so that the shared machine's load falls on both sides of a pair
alike. Request bodies are encoded before the clock starts (CI sends files it already has), and one
warm-up request and one warm-up ``COPY`` go before it. Prints the median points/s of each side and
the median of the per-pair ratios COPY time / service time (the aim of issue 29: at least 0.3 with
one result per request, 0.6 with ten).

:func:`run_service` and :func:`run_copy` time each side whole in a database of its own (the scaling
curve's ingest points, ``benchmarks/scaling.py``).
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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
from _db import conninfo, fresh_database, median_paired_ratio
from _serve import free_port, wait_ready

from ablate.backend.db.database import Database
from ablate.backend.db.series_codec import pack
from ablate.backend.schemas.catalog import ClusterDef, ReleaseCreate, VariantDef, WorkloadDef
from ablate.backend.services import catalog, tokens

ABLATE = str(Path(sys.executable).with_name("ablate"))
RELEASE = "training-nv-pytorch:25.12"


@contextmanager
def server(url: str, workers: int = 1) -> Iterator[str]:
    """``ablate serve`` in its own process, so client and server do not share one GIL; with
    ``workers`` > 1, ``uvicorn --workers`` on the app factory (the deployment's several API processes)."""
    port = free_port()
    env = {**os.environ, "ABLATE_DATABASE_URL": url, "ABLATE_PORT": str(port), "ABLATE_LOG_LEVEL": "warning"}
    if workers == 1:
        command = [ABLATE, "serve", "--no-dispatcher"]
    else:
        command = [sys.executable, "-m", "uvicorn", "--factory", "ablate.backend.api.app:create_app"]
        command += ["--workers", str(workers), "--host", "127.0.0.1", "--port", str(port)]
        command += ["--log-level", "info", "--no-access-log"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started = count_startups(proc)
    base = f"http://127.0.0.1:{port}"
    try:
        # Every worker must be up: one that is still importing would leave its share of the
        # connections to the others and the clock would count its start-up.
        wait_ready(proc, base, 120, lambda: workers == 1 or started() >= workers)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def count_startups(proc: subprocess.Popen[str]) -> Callable[[], int]:
    """Drain the server's stderr (a full pipe would block it), count uvicorn's lines saying that a
    worker's application started, and pass on everything but uvicorn's INFO lines."""
    count = [0]

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "Application startup complete" in line:
                count[0] += 1
            elif not line.startswith("INFO:"):
                sys.stderr.write(line)

    threading.Thread(target=read, daemon=True).start()
    return lambda: count[0]


def seed_catalog(url: str) -> str:
    """Release and catalog entries (not timed), and an admin token; returns the token's secret."""
    db = Database.from_url(url)
    with db.transaction() as s:
        catalog.create_release(s, ReleaseCreate(image="training-nv-pytorch", tag="25.12", platform="gpu"))
        from ablate.backend.db.models import Cluster, Variant, Workload

        catalog.create_named(
            s, Cluster, ClusterDef(name="h200-2x8", accelerator="gpu", nodes=2, devices_per_node=8)
        )
        catalog.create_named(s, Workload, WorkloadDef(name="deepspeed/llama3-8b"))
        catalog.create_named(s, Variant, VariantDef(name="Base"))
        _, secret = tokens.create_token(s, "bench", "submit")
    db.dispose()
    return secret


def make_results(n: int, points: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    steps = list(range(1, points + 1))
    out = []
    for i in range(n):
        values = (5.0 + 0.05 * rng.standard_normal(points)).round(6).tolist()
        out.append(
            {
                "release": RELEASE,
                "cluster": "h200-2x8",
                "workload": "deepspeed/llama3-8b",
                "variant": "Base",
                "repeat": i,
                "metrics": {
                    "throughput_tokens_per_s": 412345.0 + i,
                    "step_time_s": 5.08,
                    "peak_memory_gib": 61.2,
                },
                "series": {"step_time_s": {"steps": steps, "values": values}},
                "provenance": {"host": f"node-{i % 16}"},
                "started_at": "2026-12-01T10:00:00Z",
                "finished_at": "2026-12-01T10:20:00Z",
            }
        )
    return out


def run_service(url: str, results: list[dict[str, Any]], batch: int, clients: int, workers: int = 1) -> float:
    """Seconds to submit ``results`` in batches of ``batch`` from ``clients`` threads to a server of
    ``workers`` processes."""
    secret = seed_catalog(url)
    bodies = [json.dumps({"results": results[i : i + batch]}).encode() for i in range(0, len(results), batch)]
    with server(url, workers) as base:
        headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
        pool_clients = [httpx.Client(base_url=base, headers=headers, timeout=300) for _ in range(clients)]

        def send(i: int) -> None:
            c = pool_clients[i % clients]
            r = c.post("/api/v1/results", content=bodies[i], headers={"Idempotency-Key": f"bench-{i}"})
            if r.status_code != 201:
                raise RuntimeError(f"{r.status_code}: {r.text[:300]}")

        # One request before the clock, as the COPY side connects before its clock: FastAPI builds a
        # route's state on its first request (~0.25 s here) and the pool opens its first connection.
        warm = json.dumps({"results": [{**results[0], "repeat": len(results)}]}).encode()
        r = pool_clients[0].post("/api/v1/results", content=warm, headers={"Idempotency-Key": "warm-up"})
        if r.status_code != 201:
            raise RuntimeError(f"{r.status_code}: {r.text[:300]}")
        start = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(send, range(len(bodies))))
        elapsed = time.perf_counter() - start
        for c in pool_clients:
            c.close()
    return elapsed


def run_copy(url: str, results: list[dict[str, Any]], commit_every: int | None = None) -> float:
    """The same rows with COPY: runs, their metrics, their packed series (from the decoded values).

    ``commit_every``: COPY and commit that many results at a time, as the service commits each request
    before it answers (each commit waits for PostgreSQL's WAL flush, ~4 ms on this disk); None: all of
    them in one transaction."""
    seed_catalog(url)
    with psycopg.connect(conninfo(url)) as conn:
        ids = {
            t: conn.execute(f"SELECT id FROM {t} LIMIT 1").fetchone()[0]  # type: ignore[index]
            for t in ("releases", "clusters", "workloads", "variants")
        }
        conn.commit()
        step = commit_every or len(results)
        start = time.perf_counter()
        for i in range(0, len(results), step):
            _copy_rows(conn, ids, results[i : i + step])
            conn.commit()
        return time.perf_counter() - start


def _copy_rows(conn: psycopg.Connection, ids: dict[str, int], results: list[dict[str, Any]]) -> None:
    now = datetime.now(UTC)
    first = conn.execute("SELECT nextval('runs_id_seq')").fetchone()[0]  # type: ignore[index]
    run_ids = list(range(first, first + len(results)))
    conn.execute("SELECT setval('runs_id_seq', %s)", (first + len(results),))
    cols = (
        "id, release_id, cluster_id, workload_id, variant_id, repeat, status, attempt, source, "
        "idempotency_key, queue_order, created_at, started_at, finished_at, updated_at, "
        "provenance, environment"
    )
    with conn.cursor() as cur:
        with cur.copy(f"COPY runs ({cols}) FROM STDIN") as copy:
            for run_id, r in zip(run_ids, results, strict=True):
                copy.write_row(
                    (
                        run_id,
                        ids["releases"],
                        ids["clusters"],
                        ids["workloads"],
                        ids["variants"],
                        r["repeat"],
                        "succeeded",
                        1,
                        "ci",
                        f"copy-{run_id}",
                        0,
                        now,
                        r["started_at"],
                        r["finished_at"],
                        now,
                        json.dumps(r["provenance"]),
                        "{}",
                    )
                )
        with cur.copy("COPY run_metrics (run_id, name, value, unit) FROM STDIN") as copy:
            units = {"throughput_tokens_per_s": "tokens/s", "step_time_s": "s", "peak_memory_gib": "GiB"}
            for run_id, r in zip(run_ids, results, strict=True):
                for name, value in r["metrics"].items():
                    copy.write_row((run_id, name, value, units[name]))
        series_cols = "run_id, metric, n_points, steps, values, min_value, max_value, last_value"
        with cur.copy(f"COPY run_series ({series_cols}) FROM STDIN") as copy:
            for run_id, r in zip(run_ids, results, strict=True):
                for name, s in r["series"].items():
                    v = np.asarray(s["values"], dtype=np.float64)
                    blob_s, blob_v = pack(s["steps"], v)
                    copy.write_row((run_id, name, v.size, blob_s, blob_v, v.min(), v.max(), v[-1]))


def seed_copy_variant(url: str) -> None:
    """A variant of its own for the COPY side's rows, which share the service's database: a CI result is
    one (cell, repeat), so the same repeats need another cell."""
    db = Database.from_url(url)
    with db.transaction() as s:
        from ablate.backend.db.models import Variant

        catalog.create_named(s, Variant, VariantDef(name=COPY_VARIANT))
    db.dispose()


COPY_VARIANT = "Base-copy"


def _post(client: httpx.Client, body: bytes, key: str) -> None:
    r = client.post("/api/v1/results", content=body, headers={"Idempotency-Key": key})
    if r.status_code != 201:
        raise RuntimeError(f"{r.status_code}: {r.text[:300]}")


def interleaved(
    url: str, results: list[dict[str, Any]], batch: int, clients: int, workers: int, pair: int, first: int
) -> list[tuple[float, float]]:
    """(COPY seconds, service seconds) of each pair: the results in slices of ``pair`` results, each
    slice written once by the service (requests of ``batch``) and once by ``COPY`` committing every
    ``batch`` results, back to back into the same database, which of the two goes first alternating
    from pair to pair (``first``: the parity of the first pair)."""
    secret = seed_catalog(url)
    seed_copy_variant(url)
    bodies = [json.dumps({"results": results[i : i + batch]}).encode() for i in range(0, len(results), batch)]
    per_pair = max(1, pair // batch)
    out: list[tuple[float, float]] = []
    with (
        server(url, workers) as base,
        psycopg.connect(conninfo(url)) as conn,
        ThreadPoolExecutor(clients) as pool,
    ):
        headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
        pool_clients = [httpx.Client(base_url=base, headers=headers, timeout=300) for _ in range(clients)]

        def send(i: int) -> None:
            _post(pool_clients[i % clients], bodies[i], f"bench-{i}")

        ids = {
            t: conn.execute(f"SELECT id FROM {t} LIMIT 1").fetchone()[0]  # type: ignore[index]
            for t in ("releases", "clusters", "workloads")
        }
        row = conn.execute("SELECT id FROM variants WHERE name = %s", (COPY_VARIANT,)).fetchone()
        ids["variants"] = row[0]  # type: ignore[index]
        # Before the clock, on both sides: FastAPI builds a route's state on its first request (~0.25 s
        # here) and the pool opens its first connection; the COPY side's first statements fill caches.
        warm = {**results[0], "repeat": len(results)}
        _post(pool_clients[0], json.dumps({"results": [warm]}).encode(), "warm")
        _copy_rows(conn, ids, [warm])
        conn.commit()

        def service(requests: range) -> float:
            start = time.perf_counter()
            list(pool.map(send, requests))
            return time.perf_counter() - start

        def copy(requests: range) -> float:
            start = time.perf_counter()
            for i in requests:
                _copy_rows(conn, ids, results[i * batch : (i + 1) * batch])
                conn.commit()
            return time.perf_counter() - start

        for k, lo in enumerate(range(0, len(bodies), per_pair)):
            requests = range(lo, min(lo + per_pair, len(bodies)))
            if (k + first) % 2 == 0:
                c = copy(requests)
                s = service(requests)
            else:
                s = service(requests)
                c = copy(requests)
            out.append((c, s))
        for c in pool_clients:
            c.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results", type=int, default=200)
    parser.add_argument("--points", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=10, help="results per request")
    parser.add_argument("--clients", type=int, default=4, help="concurrent HTTP clients")
    parser.add_argument("--workers", type=int, default=1, help="server processes (uvicorn workers)")
    parser.add_argument("--reps", type=int, default=3, help="fresh databases and servers")
    parser.add_argument(
        "--pair", type=int, default=20, help="results a pair: each side writes them back to back (>= --batch)"
    )
    args = parser.parse_args()
    results = make_results(args.results, args.points)
    load = os.getloadavg()[0]
    pairs: list[tuple[float, float]] = []
    for rep in range(args.reps):
        with fresh_database() as url:
            got = interleaved(url, results, args.batch, args.clients, args.workers, args.pair, rep)
        pairs += got
        ratios = [c / s for c, s in got]
        print(
            f"rep {rep + 1}: {len(got)} pairs, service/COPY median {statistics.median(ratios):.2f} "
            f"(range {min(ratios):.2f}-{max(ratios):.2f}), load {os.getloadavg()[0]:.1f}"
        )
    aim = 0.3 if args.batch == 1 else 0.6 if args.batch >= 10 else "n/a"
    requests = max(1, args.pair // args.batch)
    points = requests * args.batch * args.points
    print(
        f"{args.results} results x {args.points} points a rep, {args.reps} rep(s), pairs of "
        f"{requests} request(s) of {args.batch}; {args.clients} client(s), {args.workers} server "
        f"process(es); load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    s = statistics.median(s for _, s in pairs)
    c = statistics.median(c for c, _ in pairs)
    print(f"service (HTTP, PostgreSQL): {points / s:,.0f} points/s, {1000 * s / requests:.1f} ms a request")
    print(f"bare COPY, a commit per {args.batch}: {points / c:,.0f} points/s, {1000 * c / requests:.1f} ms")
    ratios = sorted(c / s for c, s in pairs)
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    paired = median_paired_ratio([c for c, _ in pairs], [s for _, s in pairs])
    print(
        f"ratio service/COPY: median of {len(ratios)} paired ratios {paired:.2f} "
        f"(quartiles {q[0]:.2f}-{q[2]:.2f}, range {ratios[0]:.2f}-{ratios[-1]:.2f}; aim >= {aim})"
    )


if __name__ == "__main__":
    main()
