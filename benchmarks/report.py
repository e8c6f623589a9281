"""How long the release comparison and the HTML report take at production size.

    python benchmarks/report.py [--workloads 20] [--variants 5] [--repeats 5] [--history 10] [--reps 5]
                                [--seed ingest|copy]

Seeds a fresh PostgreSQL database (dropped afterwards) through the real ingest path: one release
with variants x workloads x repeats succeeded runs, plus ``--history`` earlier releases of the same
image with the same grid (``--seed copy``: the same rows by ``COPY``, for sizes the ingest path
takes too long to seed). Then times, for the newest release:

* comparison JSON, cold: ``build_release_comparison`` + the compact JSON the API answers with, the
  cache of kept builds emptied first (every query, bootstrap and test runs again);
* comparison JSON, warm: the same when nothing was written since the last read: the kept build is
  reused (services/comparison/cache.py) and only the JSON is rendered again;
* exported JSON: the same comparison as the indented report file (``ablate report --format json``);
* HTML report, cold: the self-contained HTML from a built comparison, every figure built (no
  figure is memoised anywhere);
* first build in the process: one comparison right after start-up (imports done, nothing else);
* queries: SQL statements one comparison issues.

Times are the median of ``--reps`` (wall and this process's CPU time; on a shared machine the CPU
column is the better guide). Aims (benchmarks/README.md): comparison under 200 ms, HTML under 2 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
from _db import RUN_COLUMNS, conninfo, copy_rows, fresh_database, set_run_sequence, versions_bumped_once
from sqlalchemy import event, select

from ablate.backend.db.database import Database
from ablate.backend.db.models import Release, Run, RunMetric
from ablate.backend.reports import render
from ablate.backend.reports.json import render_json
from ablate.backend.schemas.results import ResultsBatch
from ablate.backend.services import catalog
from ablate.backend.services import comparison as svc
from ablate.backend.services.comparison.cache import cache_for
from ablate.backend.services.ingest import _CatalogLookup, prepare_rows, result_from_ci, submit_results

IMAGE = "training-nv-pytorch"
LADDER = ("Base", "Base+ACCL", "AC2+ACCL", "AC2+ACCL+CompilerOpt", "AC2+ACCL+CompilerOpt+CkptOpt")
GAIN = (1.0, 1.06, 1.09, 1.31, 1.28)
NOISE = (0.99, 1.0, 1.01, 0.995, 1.005, 0.998, 1.003)


def _variant_names(variants: int) -> list[str]:
    return [LADDER[i] if i < len(LADDER) else f"Variant{i}" for i in range(variants)]


def _metrics(k: int, w: int, v: int, r: int) -> dict[str, Any]:
    """The metrics of repeat ``r`` of variant ``v`` on workload ``w`` in release ``k``."""
    drift = 1.0 + 0.002 * ((k * 7 + w + v) % 5)  # small release-to-release spread
    tput = 10_000.0 * (1 + w / 10) * GAIN[v % len(GAIN)] * drift * NOISE[(r + w + v) % len(NOISE)]
    return {
        "throughput_tokens_per_s": tput,
        "peak_memory_gib": (40.0 + w) * (1 - 0.05 * v) + 0.1 * r,  # distinct per cell: no shared memo
        "step_time_s": {"value": 524_288 / tput, "unit": "s"},
        "mfu": 0.3 * tput / 20_000,
    }


def _result(tag: str, k: int, w: int, v: int, name: str, r: int) -> dict[str, Any]:
    return {
        "release": {"image": IMAGE, "tag": tag, "platform": "gpu", "manifest": {"vllm": f"0.{k}.0"}},
        "cluster": {"name": "h200-2x8", "accelerator": "gpu", "nodes": 2, "devices_per_node": 8},
        "workload": {"name": f"workload-{w:02d}"},
        "variant": {"name": name, "position": v + 1},
        "repeat": r,
        "metrics": _metrics(k, w, v, r),
        "environment": {"NCCL_SOCKET_IFNAME": "eth0"},
        "provenance": {"host": f"node-{r % 2}"},
    }


def _results(tag: str, k: int, variants: int, workloads: int, repeats: int) -> list[dict[str, Any]]:
    names = _variant_names(variants)
    return [
        _result(tag, k, w, v, name, r)
        for w in range(workloads)
        for v, name in enumerate(names)
        for r in range(repeats)
    ]


def _tags(history: int) -> list[str]:
    return [f"25.{m}" for m in range(1, history + 2)]


def seed(db: Database, history: int, variants: int, workloads: int, repeats: int) -> str:
    """Every result through the real ingest path (``submit_results``); returns the newest release."""
    tags = _tags(history)
    for k, tag in enumerate(tags):
        rows = _results(tag, k, variants, workloads, repeats)
        for i in range(0, len(rows), 1000):
            with db.transaction() as session:
                batch = ResultsBatch.model_validate({"results": rows[i : i + 1000]})
                submit_results(session, batch, token_scope="admin", idempotency_key=None)
    return f"{IMAGE}:{tags[-1]}"


def seed_copy(db: Database, url: str, history: int, variants: int, workloads: int, repeats: int) -> str:
    """The rows ``seed`` stores, written by ``COPY`` (10,000 cells x 5 repeats x 11 releases is 550,000
    runs: hours through the ingest path). The catalog goes through the ingest path's own resolvers,
    and each metric's stored unit and direction come from the ingest path's validation of one result,
    so the rows are those ``seed`` writes, but for ids and timestamps."""
    tags, names = _tags(history), _variant_names(variants)
    with db.transaction() as session:
        first = ResultsBatch.model_validate({"results": [_result(tags[0], 0, 0, 0, names[0], 0)]}).results[0]
        stored = {m.name: (m.unit, m.better) for m in prepare_rows(result_from_ci(first)).metrics}
        lookup, ids = _CatalogLookup(session, "admin", cached=False), {}
        for k, tag in enumerate(tags):
            for w in range(workloads):
                for v, name in enumerate(names):
                    item = ResultsBatch.model_validate({"results": [_result(tag, k, w, v, name, 0)]}).results[
                        0
                    ]
                    run = lookup.run_for(item, "results[0]", None)
                    ids[k, w, v] = (run.release_id, run.cluster_id, run.workload_id, run.variant_id)
    now = datetime.now(UTC)
    keys = [
        (k, w, v, r)
        for k in range(len(tags))
        for w in range(workloads)
        for v in range(variants)
        for r in range(repeats)
    ]

    def runs() -> Iterator[tuple[object, ...]]:
        env = json.dumps({"NCCL_SOCKET_IFNAME": "eth0"})
        for run_id, (k, w, v, r) in enumerate(keys, start=1):
            tput = _metrics(k, w, v, r)["throughput_tokens_per_s"]
            host = json.dumps({"host": f"node-{r % 2}"})
            yield (run_id, *ids[k, w, v], r, "succeeded", 1, "ci", 0, now, None, None, now, host, env, tput)

    def metrics() -> Iterator[tuple[object, ...]]:
        for run_id, (k, w, v, r) in enumerate(keys, start=1):
            for name, value in _metrics(k, w, v, r).items():
                number = value["value"] if isinstance(value, dict) else value
                yield (run_id, name, float(number), *stored[name])

    with psycopg.connect(conninfo(url)) as conn:
        with versions_bumped_once(conn):  # one version per release, not one trigger per row
            copy_rows(conn, "runs", RUN_COLUMNS + ", latest_throughput", runs())
            copy_rows(conn, "run_metrics", "run_id, name, value, unit, better", metrics())
        set_run_sequence(conn, len(keys))
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")
    return f"{IMAGE}:{tags[-1]}"


def _forget(db: Database) -> None:
    """Empty the engine's caches of built comparisons and verdicts (services/comparison/cache.py)."""
    with db.read() as session:
        caches = (cache_for(session), cache_for(session, verdicts=True))
    for cache in caches:
        if cache is not None:
            cache.clear()


def cold_comparison(db: Database, ref: str) -> Callable[[], object]:
    """The comparison JSON as the API answers it, built from nothing (no result is cached anywhere)."""

    def cold() -> object:
        _forget(db)
        with db.read() as session:
            return render_json(svc.build_release_comparison(session, ref), indent=None)

    return cold


def warm_comparison(db: Database, ref: str) -> Callable[[], object]:
    """The comparison JSON as the API answers it when nothing was written since the last read: the
    versions are read and the kept build is reused (the JSON is rendered every time)."""

    def warm() -> object:
        with db.read() as session:
            return render_json(svc.build_release_comparison(session, ref), indent=None)

    warm()  # keeps the build
    return warm


def floor_fetch(db: Database, ref: str) -> Callable[[], object]:
    """The floor of a comparison: one bare fetch of the rows it analyses (the runs of the release and
    of its baseline joined with their metrics), no analysis, nothing built."""

    def fetch() -> object:
        with db.read() as session:
            release = catalog.get_release(session, ref)
            family = svc.order_family(session.scalars(select(Release).where(Release.image == release.image)))
            index = next(i for i, r in enumerate(family) if r.id == release.id)
            ids = [r.id for r in family[max(0, index - 1) : index + 1]]
            query = (
                select(Run.id, Run.status, RunMetric.name, RunMetric.value)
                .outerjoin(RunMetric, RunMetric.run_id == Run.id)
                .where(Run.release_id.in_(ids))
            )
            return session.connection().execute(query).all()

    return fetch


def _time(fn: Callable[[], object], reps: int) -> tuple[float, float, float]:
    """(median wall, min wall, median CPU of this process): CPU time shows the cost on a shared machine."""
    wall, cpu = [], []
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), min(wall), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workloads", type=int, default=20)
    parser.add_argument("--variants", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--history", type=int, default=10)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--seed", choices=("ingest", "copy"), default="ingest", help="how the runs are stored"
    )
    args = parser.parse_args()

    with fresh_database() as url:
        db = Database.from_url(url)
        try:
            t = time.perf_counter()
            sizes = (args.history, args.variants, args.workloads, args.repeats)
            ref = seed(db, *sizes) if args.seed == "ingest" else seed_copy(db, url, *sizes)
            runs = (args.history + 1) * args.variants * args.workloads * args.repeats
            print(f"seeded {runs} runs in {args.history + 1} releases in {time.perf_counter() - t:.1f} s")

            def build() -> svc.ReleaseComparison:
                with db.read() as session:
                    return svc.build_release_comparison(session, ref)

            def forget() -> None:
                _forget(db)  # the kept builds (services/comparison/cache.py): every build here is cold

            t, c = time.perf_counter(), time.process_time()
            render_json(build(), indent=None)
            first = (time.perf_counter() - t, time.process_time() - c)

            statements: list[str] = []

            def count(*a: object) -> None:
                statements.append(str(a[2]))

            forget()
            event.listen(db.engine, "before_cursor_execute", count)
            comparison = build()
            event.remove(db.engine, "before_cursor_execute", count)
            queries = len(statements)
            render(comparison, "html")  # load plotly's validators once, as a running server has

            cold = cold_comparison(db, ref)

            results = {
                "comparison JSON (API, compact), cold": _time(cold, args.reps),
                "comparison JSON (API, compact), warm (kept build)": _time(
                    warm_comparison(db, ref), args.reps
                ),
                "exported JSON (indented), cold": _time(lambda: (forget(), render_json(build())), args.reps),
                "HTML report from a comparison, cold": _time(lambda: render(comparison, "html"), args.reps),
                "build + HTML report, cold": _time(lambda: (forget(), render(build(), "html")), args.reps),
            }
            size = len(render(comparison, "html").encode())
            print(
                f"release {ref}: {len(comparison.ladders)} ladders, {len(comparison.deltas)} release deltas"
            )
            print(f"queries per comparison: {queries}; HTML size {size / 1e6:.1f} MB")
            print(
                f"first comparison JSON in this process: wall {first[0] * 1000:.0f} ms, "
                f"cpu {first[1] * 1000:.0f} ms"
            )
            for label, (med, low, cpu) in results.items():
                times = f"median {med * 1000:7.0f} ms  min {low * 1000:7.0f} ms  cpu {cpu * 1000:6.0f} ms"
                print(f"{label:<40} {times}")
        finally:
            db.dispose()


if __name__ == "__main__":
    main()
