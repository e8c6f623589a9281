"""Reading 1,000 downsampled points of a 100,000-point series: from its stored level, against reading
and downsampling the whole series, in the same run.

    .venv/bin/python benchmarks/series_downsampled.py [--points 100000] [--max-points 1000]
        [--reps 30] [--backend postgresql|sqlite]

Two runs get the same series through ingest (so both have the levels ingest computes); the level
rows of the second are then deleted, which is exactly the read path before levels existed: fetch
both blobs, unpack, min-max downsample. Each repetition times ``run_series(max_points=...)`` on both,
alternating which goes first; prints the medians and the median of the paired ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from _db import fresh_db, median_paired_ratio
from sqlalchemy import delete, select

from ablate.backend.db.database import Database
from ablate.backend.db.models import Run, RunSeriesLevel
from ablate.backend.domain.runner import RunResult
from ablate.backend.schemas.catalog import ClusterDef, ReleaseCreate, VariantDef, WorkloadDef
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import catalog, ingest, runs, studies


def _two_runs(db: Database, points: int) -> tuple[int, int]:
    steps = list(range(points))
    values = (5.0 + np.sin(np.arange(points) / 500.0)).tolist()
    with db.transaction() as s:
        catalog.create_release(s, ReleaseCreate(image="bench", tag="1", platform="gpu"))
        catalog.resolve_named(s, catalog.Cluster, ClusterDef(name="c", accelerator="cpu"), "c")
        catalog.resolve_named(s, catalog.Variant, VariantDef(name="v"), "v")
        catalog.resolve_named(s, catalog.Workload, WorkloadDef(name="w", runner="torch-llm"), "w")
        plan = StudyPlan(release="bench:1", cluster="c", variants=["v"], workloads=["w"], repeats=2)
        study = studies.create_study(s, plan)
        ids = [r.id for r in sorted(study.runs, key=lambda r: r.id)]
        for run_id in ids:
            result = RunResult("succeeded", series={"step_time_s": (steps, values)})
            ingest.record_run_result(s, s.get(Run, run_id), result)
        s.execute(delete(RunSeriesLevel).where(RunSeriesLevel.run_id == ids[1]))
    return ids[0], ids[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--max-points", type=int, default=1_000)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--backend", choices=["postgresql", "sqlite"], default="postgresql")
    args = parser.parse_args()

    with fresh_db(args.backend) as db:
        with_levels, without = _two_runs(db, args.points)
        with db.read() as s:
            stored = s.scalars(select(RunSeriesLevel.max_points).where(RunSeriesLevel.run_id == with_levels))
            print(f"backend={args.backend} points={args.points} max_points={args.max_points}", end=" ")
            print(f"reps={args.reps}")
            print(f"levels stored: {sorted(stored)}")
        times: dict[int, list[float]] = {with_levels: [], without: []}
        for rep in range(args.reps + 3):
            order = (with_levels, without) if rep % 2 == 0 else (without, with_levels)
            for run_id in order:
                with db.read() as s:
                    t0 = time.perf_counter()
                    out = runs.run_series(s, run_id, "step_time_s", max_points=args.max_points)
                    elapsed = time.perf_counter() - t0
                assert len(out["values"]) <= args.max_points and out["downsampled"]
                if rep >= 3:  # warm-up: connections, caches
                    times[run_id].append(elapsed)
        level_ms = statistics.median(times[with_levels]) * 1e3
        full_ms = statistics.median(times[without]) * 1e3
        print(f"from the stored level:        {level_ms:8.2f} ms (median)")
        print(f"from the whole series:        {full_ms:8.2f} ms (median)")
        speedup = median_paired_ratio(times[without], times[with_levels])
        print(f"speed-up, median paired ratio: {speedup:7.1f}x")


if __name__ == "__main__":
    main()
