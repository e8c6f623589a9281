"""How fast a run's 100,000-point step series loads, against a row-per-point table in the same run.

    python benchmarks/series_load.py [--points 100000] [--reps 15] [--backend postgresql|sqlite]

Ablate packs a series into one ``run_series`` row (int64 steps + float64 values). The baseline is
the row-per-point layout (one row per step, as MLflow's metric history stores it), read with the
same driver. Prints the median load time of each and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime

import numpy as np
from _db import fresh_db
from sqlalchemy import Column, Float, Integer, MetaData, Table, insert, select

from ablate.backend.db.models import Cluster, Release, Run, RunSeries, Variant, Workload
from ablate.backend.db.series_codec import pack, unpack


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--backend", choices=["postgresql", "sqlite"], default="postgresql")
    args = parser.parse_args()

    with fresh_db(args.backend) as db:
        steps = np.arange(args.points, dtype=np.int64)
        values = 5.0 + np.sin(steps / 500.0)
        baseline = Table(
            "bench_points",
            MetaData(),
            Column("run_id", Integer, index=True),
            Column("step", Integer),
            Column("value", Float),
        )
        baseline.create(db.engine)
        with db.transaction() as s:
            rel = Release(image="bench", tag="1", platform="gpu")
            var, wl = Variant(name="Base"), Workload(name="bench/wl")
            cl = Cluster(name="bench", accelerator="cpu")
            run = Run(release=rel, variant=var, workload=wl, cluster=cl, started_at=datetime.now(UTC))
            blob_s, blob_v = pack(steps, values)
            run.series = [RunSeries(metric="step_time_s", n_points=args.points, steps=blob_s, values=blob_v)]
            s.add(run)
            s.flush()
            run_id = run.id
            s.execute(
                insert(baseline),
                [
                    {"run_id": run_id, "step": int(a), "value": float(b)}
                    for a, b in zip(steps, values, strict=True)
                ],
            )

        def load_packed() -> int:
            with db.read() as s:
                row = s.execute(
                    select(RunSeries.steps, RunSeries.values).where(
                        RunSeries.run_id == run_id, RunSeries.metric == "step_time_s"
                    )
                ).one()
                got_steps, _ = unpack(row.steps, row.values)
                return len(got_steps)

        def load_rows() -> int:
            with db.read() as s:
                rows = s.execute(
                    select(baseline.c.step, baseline.c.value)
                    .where(baseline.c.run_id == run_id)
                    .order_by(baseline.c.step)
                ).all()
                arr = np.array(rows, dtype=np.float64)
                return len(arr)

        def median_time(fn) -> float:  # type: ignore[no-untyped-def]
            times = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                assert fn() == args.points
                times.append(time.perf_counter() - t0)
            return statistics.median(times)

        packed = median_time(load_packed)
        rows = median_time(load_rows)
        print(f"backend={args.backend} points={args.points} reps={args.reps}")
        print(f"packed run_series row : median {packed * 1000:8.2f} ms")
        print(f"row per point baseline: median {rows * 1000:8.2f} ms")
        print(f"ratio baseline/packed : {rows / packed:8.1f}x")


if __name__ == "__main__":
    main()
