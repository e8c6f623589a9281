"""Scaling curves: each a markdown table printed, and a plotly figure written under ``--out``.

    PYTHONPATH=. .venv/bin/python benchmarks/scaling.py --curve ingest      # points/s vs 1, 4, 16 clients
    PYTHONPATH=. .venv/bin/python benchmarks/scaling.py --curve report      # comparison vs 100..10,000 cells
    PYTHONPATH=. .venv/bin/python benchmarks/scaling.py --curve history     # one cell over 30 releases
    PYTHONPATH=. .venv/bin/python benchmarks/scaling.py --curve list_runs   # p95 vs 100k and 1M runs
    PYTHONPATH=. .venv/bin/python benchmarks/scaling.py --curve dispatch    # runs/s vs 64..1,024 queued
    PYTHONPATH=. .venv/bin/python benchmarks/scaling.py --curve all --quick # small sizes, a smoke check

Each curve drives the functions of its own benchmark (ingest.py, report.py, list_runs.py,
dispatch.py) at every size of ``--sizes`` and writes ``<out>/<curve>.json`` (the figure, with the
table and the conditions in ``layout.meta``) and ``<out>/scaling.html`` (every figure of ``<out>``,
plotly.js inlined once). Figures are medians of ``--reps``; the conditions (date, cores, load
average) are printed and stored with each curve. Not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _db import fresh_database, median_paired_ratio
from _scaling import Curve, conditions, markdown_table, write

RESULTS = Path(__file__).resolve().parent / "results"

FULL: dict[str, list[int]] = {
    "ingest": [1, 4, 16],
    "report": [100, 1_000, 10_000],
    "history": [100, 1_000],
    "list_runs": [100_000, 1_000_000],
    "dispatch": [64, 128, 256, 512, 1024],
}
QUICK: dict[str, list[int]] = {
    "ingest": [1, 4],
    "report": [10, 50],
    "history": [10, 50],
    "list_runs": [2_000, 10_000],
    "dispatch": [16, 32],
}


def ingest_curve(args: argparse.Namespace, sizes: list[int]) -> Curve:
    """Points/s of ``POST /api/v1/results`` from 1..16 concurrent clients, for each number of server
    processes, against one bare ``COPY`` stream of the same rows timed in the same repetition."""
    from ingest import make_results, run_copy, run_service

    workers = [int(w) for w in args.workers.split(",")]
    results = make_results(args.results, args.points)
    points = args.results * args.points
    series: dict[str, list[float | None]] = {f"service, {w} process(es)": [] for w in workers}
    series["bare COPY, 1 stream"] = []
    ratios: dict[str, list[str]] = {f"paired ratio service/COPY, {w}": [] for w in workers}
    for clients in sizes:
        service: dict[int, list[float]] = {w: [] for w in workers}
        baseline: list[float] = []
        for rep in range(args.reps):
            order = workers[rep % len(workers) :] + workers[: rep % len(workers)]  # rotate who goes first
            for w in order:
                with fresh_database() as url:
                    service[w].append(run_service(url, results, args.batch, clients, w))
            with fresh_database() as url:
                baseline.append(run_copy(url, results))
            print(
                f"  clients {clients} rep {rep + 1}: "
                + ", ".join(f"{w} proc {points / service[w][-1]:,.0f}" for w in workers)
                + f", COPY {points / baseline[-1]:,.0f} points/s",
                flush=True,
            )
        for w in workers:
            series[f"service, {w} process(es)"].append(points / statistics.median(service[w]))
            ratios[f"paired ratio service/COPY, {w}"].append(
                f"{median_paired_ratio(baseline, service[w]):.2f}"
            )
        series["bare COPY, 1 stream"].append(points / statistics.median(baseline))
    return Curve(
        name="ingest",
        title=f"Ingest: {args.results} results x {args.points:,} points, batches of {args.batch}",
        x_label="concurrent clients",
        y_label="points/s (median)",
        x=sizes,
        series=series,
        columns=ratios,
        note=f"medians of {args.reps} reps",
    )


def report_curve(args: argparse.Namespace, sizes: list[int]) -> Curve:
    """Wall time of the comparison JSON of the newest release against its size in cells (variants x
    workloads), with ``--history`` earlier releases of the same grid: cold (the cache of kept builds
    emptied), warm (nothing written since the last read: the kept build, the JSON rendered again),
    and the floor measured beside them: one bare fetch of the rows the comparison analyses."""
    from report import _time, cold_comparison, floor_fetch, seed, seed_copy, warm_comparison

    from ablate.backend.db.database import Database

    cold_ms: list[float | None] = []
    cpu: list[float | None] = []
    warm_ms: list[float | None] = []
    floor_ms: list[float | None] = []
    columns: dict[str, list[str]] = {"cold / floor": [], "warm / floor": [], f"seeded ({args.seed})": []}
    for cells in sizes:
        if cells % args.variants:
            raise SystemExit(f"{cells} cells is not a multiple of --variants {args.variants}")
        shape = (args.history, args.variants, cells // args.variants, args.repeats)
        with fresh_database() as url:
            db = Database.from_url(url)
            try:
                t = time.perf_counter()
                ref = seed(db, *shape) if args.seed == "ingest" else seed_copy(db, url, *shape)
                took = time.perf_counter() - t
                runs = (args.history + 1) * cells * args.repeats
                cold = cold_comparison(db, ref)
                cold()  # the first build in a process pays imports and caches; not what is timed
                fetch = floor_fetch(db, ref)
                fetch()
                # Interleaved per rep, so the three see the same load on a shared machine.
                c_wall, c_cpu, w_wall, f_wall = [], [], [], []
                for _ in range(args.reps):
                    median, _, cpu_median = _time(cold, 1)
                    c_wall.append(median)
                    c_cpu.append(cpu_median)
                    w_wall.append(_time(warm_comparison(db, ref), 1)[0])
                    f_wall.append(_time(fetch, 1)[0])
            finally:
                db.dispose()
        cold_ms.append(statistics.median(c_wall) * 1000)
        cpu.append(statistics.median(c_cpu) * 1000)
        warm_ms.append(statistics.median(w_wall) * 1000)
        floor_ms.append(statistics.median(f_wall) * 1000)
        columns["cold / floor"].append(f"{median_paired_ratio(c_wall, f_wall):.1f}")
        columns["warm / floor"].append(f"{median_paired_ratio(w_wall, f_wall):.2f}")
        columns[f"seeded ({args.seed})"].append(f"{runs:,} runs in {took:.0f} s")
        print(
            f"  {cells} cells: cold {cold_ms[-1]:.0f} ms (CPU {cpu[-1]:.0f}), warm {warm_ms[-1]:.1f} ms, "
            f"floor {floor_ms[-1]:.1f} ms",
            flush=True,
        )
    return Curve(
        name="report",
        title=f"Release comparison JSON, {args.variants} variants x N workloads, "
        f"{args.repeats} repeats, {args.history} history releases",
        x_label="cells in the release",
        y_label="ms (median)",
        x=sizes,
        series={
            "cold, wall": cold_ms,
            "cold, CPU of this process": cpu,
            "warm (kept build), wall": warm_ms,
            "floor: bare fetch of its rows, wall": floor_ms,
        },
        columns=columns,
        log_y=True,
        note=f"medians of {args.reps} reps; ratios are medians of per-rep ratios against the floor",
    )


def _history_calls(
    db: Any, key: Any, cluster_id: int | None
) -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any]]:
    """(warm history, cold history, the floor's bare fetch) of one cell of ``report.IMAGE``."""
    from report import IMAGE
    from sqlalchemy import select

    from ablate.backend.db.models import Release, Run, RunMetric, Variant, Workload
    from ablate.backend.services.comparison.cache import cache_for
    from ablate.backend.services.history import cell_history

    def history() -> Any:
        with db.read() as session:
            return cell_history(session, IMAGE, key)

    def cold() -> Any:
        with db.read() as session:
            caches = (cache_for(session), cache_for(session, verdicts=True))
        for cache in caches:
            if cache is not None:
                cache.clear()
        return history()

    def fetch() -> Any:
        with db.read() as session:
            query = (
                select(Run.release_id, Run.status, RunMetric.name, RunMetric.value)
                .join(RunMetric, RunMetric.run_id == Run.id)
                .join(Release, Release.id == Run.release_id)
                .join(Workload, Workload.id == Run.workload_id)
                .join(Variant, Variant.id == Run.variant_id)
                .where(
                    Release.image == IMAGE,
                    Run.cluster_id == cluster_id,
                    Workload.name == key.workload,
                    Variant.name == key.variant,
                )
            )
            return session.connection().execute(query).all()

    return history, cold, fetch


def history_curve(args: argparse.Namespace, sizes: list[int]) -> Curve:
    """Wall time of the history of one cell and metric (``GET /api/v1/history``: its values, verdict
    and trend in every release of the family) over ``--family`` releases, against the cells of each
    release: cold (no kept comparison) and warm (nothing written since the last read), and the
    floor measured beside them: one bare fetch of that cell's runs and metrics in every release."""
    from report import _time, _variant_names, seed_copy
    from sqlalchemy import select

    from ablate.backend.db.database import Database
    from ablate.backend.db.models import Cluster, Run, Workload
    from ablate.backend.services.history import CellKey

    cold_ms: list[float | None] = []
    warm_ms: list[float | None] = []
    floor_ms: list[float | None] = []
    columns: dict[str, list[str]] = {"cold / floor": [], "warm / floor": [], "seeded (copy)": []}
    for cells in sizes:
        if cells % args.variants:
            raise SystemExit(f"{cells} cells is not a multiple of --variants {args.variants}")
        shape = (args.family - 1, args.variants, cells // args.variants, args.repeats)
        with fresh_database() as url:
            db = Database.from_url(url)
            try:
                t = time.perf_counter()
                seed_copy(db, url, *shape)
                took = time.perf_counter() - t
                with db.read() as session:
                    cluster = session.scalars(select(Run.cluster_id)).first()
                    workload = session.scalars(select(Workload.name).order_by(Workload.id)).first()
                    variant = _variant_names(args.variants)[-1]
                    cluster_name = session.get(Cluster, cluster).name if cluster else ""
                key = CellKey(cluster_name, str(workload), variant, "throughput_tokens_per_s")

                history, cold, fetch = _history_calls(db, key, cluster)
                got = cold()  # imports and first-build costs; not what is timed
                assert len(got.history.entries) == args.family, got
                fetch()
                c_wall, w_wall, f_wall = [], [], []
                for _ in range(args.reps):
                    c_wall.append(_time(cold, 1)[0])
                    w_wall.append(_time(history, 1)[0])
                    f_wall.append(_time(fetch, 1)[0])
            finally:
                db.dispose()
        cold_ms.append(statistics.median(c_wall) * 1000)
        warm_ms.append(statistics.median(w_wall) * 1000)
        floor_ms.append(statistics.median(f_wall) * 1000)
        columns["cold / floor"].append(f"{median_paired_ratio(c_wall, f_wall):.0f}")
        columns["warm / floor"].append(f"{median_paired_ratio(w_wall, f_wall):.1f}")
        columns["seeded (copy)"].append(f"{args.family * cells * args.repeats:,} runs in {took:.0f} s")
        print(
            f"  {cells} cells x {args.family} releases: cold {cold_ms[-1]:.0f} ms, "
            f"warm {warm_ms[-1]:.1f} ms, floor {floor_ms[-1]:.1f} ms",
            flush=True,
        )
    return Curve(
        name="history",
        title=f"History of one cell over {args.family} releases, {args.variants} variants x N workloads, "
        f"{args.repeats} repeats",
        x_label="cells in each release",
        y_label="ms (median)",
        x=sizes,
        series={
            "cold (no kept comparison), wall": cold_ms,
            "warm (kept comparisons), wall": warm_ms,
            "floor: bare fetch of the cell's rows, wall": floor_ms,
        },
        columns=columns,
        log_y=True,
        note=f"medians of {args.reps} reps; ratios are medians of per-rep ratios against the floor",
    )


def list_runs_curve(args: argparse.Namespace, sizes: list[int]) -> Curve:
    """p95 of each ``GET /api/v1/runs`` query shape against the number of runs stored."""
    import list_runs
    from ingest import server

    series: dict[str, list[float | None]] = {}
    loaded: list[str] = []
    for n in sizes:
        with fresh_database() as url:
            t = time.perf_counter()
            list_runs.load(url, n)
            loaded.append(f"{time.perf_counter() - t:.0f} s")
            with server(url) as base:
                rounds = [list_runs.measure(base, n, args.requests) for _ in range(args.reps)]
        for label in rounds[0]:
            series.setdefault(label, []).append(statistics.median(list_runs.p95(r[label]) for r in rounds))
        print(f"  {n:,} runs: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in series.items()), flush=True)
    return Curve(
        name="list_runs",
        title=f"GET /api/v1/runs: p95 of {args.requests} sequential requests per query shape",
        x_label="runs stored",
        y_label="p95 ms (median of rounds)",
        x=sizes,
        series=series,
        columns={"COPY load": loaded},
        log_y=True,
        note=f"median over {args.reps} rounds of the p95",
    )


def dispatch_curve(args: argparse.Namespace, sizes: list[int]) -> Curve:
    """Runs/s through the dispatcher and the database against bare Ray tasks/s, by runs queued."""
    from dispatch import NoopRunner, local_ray, measure

    from ablate.backend.domain.runner import register_runner

    register_runner("noop", NoopRunner)
    dispatcher: list[float | None] = []
    bare: list[float | None] = []
    ratios: list[str] = []
    with local_ray() as cpus:
        for n in sizes:
            bare_s: list[float] = []
            disp_s: list[float] = []
            for rep in range(args.reps):
                with fresh_database(args.backend) as url:
                    m = measure(url, n, args.concurrency, bare_first=rep % 2 == 0)
                    b, d, done = m.bare_s, m.disp_s, m.done
                if done != n:
                    raise SystemExit(f"{done} of {n} runs succeeded")
                bare_s.append(b)
                disp_s.append(d)
            bare.append(n / statistics.median(bare_s))
            dispatcher.append(n / statistics.median(disp_s))
            ratios.append(f"{median_paired_ratio(disp_s, bare_s):.2f}x")
            print(f"  {n} queued: dispatcher {dispatcher[-1]:.0f} runs/s, bare {bare[-1]:.0f} tasks/s")
    return Curve(
        name="dispatch",
        title=f"Dispatch ({args.backend}, concurrency {args.concurrency}, Ray CPUs {cpus})",
        x_label="runs queued",
        y_label="runs/s (median)",
        x=sizes,
        series={"dispatcher + database": dispatcher, "bare Ray tasks": bare},
        columns={"paired ratio (dispatcher time / bare time)": ratios},
        note=f"medians of {args.reps} reps",
    )


CURVES: dict[str, Callable[[argparse.Namespace, list[int]], Curve]] = {
    "ingest": ingest_curve,
    "report": report_curve,
    "history": history_curve,
    "list_runs": list_runs_curve,
    "dispatch": dispatch_curve,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--curve", choices=(*CURVES, "all"), required=True)
    parser.add_argument("--sizes", help="comma-separated x values (default: the issue's; --quick: small)")
    parser.add_argument("--quick", action="store_true", help="small sizes and one rep: a smoke check")
    parser.add_argument("--reps", type=int, help="repetitions per size (default 3; --quick 1)")
    parser.add_argument("--out", type=Path, help=f"results folder (default {RESULTS}; --quick: its quick/)")
    ingest = parser.add_argument_group("ingest")
    ingest.add_argument("--workers", default="1,2,4", help="server processes to compare (--quick: 1,2)")
    ingest.add_argument("--results", type=int, help="results per rep (default 640; --quick 40)")
    ingest.add_argument("--points", type=int, help="points per result's series (default 5000; --quick 500)")
    ingest.add_argument("--batch", type=int, default=10, help="results per request")
    report = parser.add_argument_group("report")
    report.add_argument("--variants", type=int, default=5, help="cells = variants x workloads")
    report.add_argument("--repeats", type=int, default=5)
    report.add_argument(
        "--history", type=int, help="earlier releases of the same grid (default 10; --quick 2)"
    )
    report.add_argument("--seed", choices=("ingest", "copy"), default="copy", help="how the runs are stored")
    report.add_argument("--family", type=int, default=30, help="history: releases in the family")
    listing = parser.add_argument_group("list_runs")
    listing.add_argument("--requests", type=int, help="requests per query shape (default 200; --quick 20)")
    dispatch = parser.add_argument_group("dispatch")
    dispatch.add_argument("--backend", choices=("sqlite", "postgresql"), default="postgresql")
    dispatch.add_argument("--concurrency", type=int, default=64, help="the dispatcher's max_concurrent_runs")
    args = parser.parse_args()

    def pick(value: int | None, full: int, quick: int) -> int:
        return value if value is not None else quick if args.quick else full

    args.reps = pick(args.reps, 3, 1)
    args.results = pick(args.results, 640, 40)
    args.points = pick(args.points, 5000, 500)
    args.history = pick(args.history, 10, 2)
    args.requests = pick(args.requests, 200, 20)
    if args.quick and args.workers == parser.get_default("workers"):
        args.workers = "1,2"
    out = args.out or (RESULTS / "quick" if args.quick else RESULTS)
    names = list(CURVES) if args.curve == "all" else [args.curve]
    for name in names:
        sizes = (
            [int(s) for s in args.sizes.split(",")] if args.sizes else (QUICK if args.quick else FULL)[name]
        )
        before = conditions()
        print(f"## {name}: sizes {sizes}, {args.reps} rep(s); {before}", flush=True)
        curve = CURVES[name](args, sizes)
        curve.note = f"{curve.note}; start {before}; end {conditions()}"
        page = write(curve, out)
        print(f"\n{markdown_table(curve)}\n\n{curve.note}\nfigure: {out / (name + '.json')}, page: {page}\n")


if __name__ == "__main__":
    main()
