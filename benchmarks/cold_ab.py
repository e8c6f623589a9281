"""CPU of one cold release comparison, on a seeded database that is kept between runs, so two versions
of the code can be timed alternately on the same rows.

    PYTHONPATH=. .venv/bin/python benchmarks/cold_ab.py --db ablate_cold_1k --workloads 200 --seed
    PYTHONPATH=. .venv/bin/python benchmarks/cold_ab.py --db ablate_cold_1k --reps 3 --json new.json
    PYTHONPATH=/tmp/old .venv/bin/python benchmarks/cold_ab.py --db ablate_cold_1k --reps 3 --json old.json

``--seed`` (re)creates the database ``--db`` with ``report.py``'s ``seed_copy`` (5 variants x
``--workloads`` x 5 repeats, 10 earlier releases) and keeps it: drop it by hand when done. Without
it, the newest release of ``--db`` is built: one warm-up build, then ``--reps`` cold builds of the API's
compact JSON (``report.py``'s ``cold_comparison``: the kept builds emptied first); prints the median
and each rep's CPU of this process, the median wall time, and the JSON's size. ``--json`` writes that
JSON, to ``cmp`` against another version's. The code timed is whatever ``ablate`` imports: a
``git archive`` of another commit, unpacked in a folder named ``ablate`` under a folder on
``PYTHONPATH``, times that commit.
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg
from _db import ADMIN, _migrate
from report import cold_comparison, seed_copy
from sqlalchemy import text

import ablate
from ablate.backend.db.database import Database


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", required=True, help="name of the kept database")
    parser.add_argument("--seed", action="store_true", help="(re)create and seed it, then stop")
    parser.add_argument("--workloads", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", help="write the comparison JSON here")
    args = parser.parse_args()
    url = f"postgresql+psycopg://postgres@127.0.0.1/{args.db}"
    if args.seed:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{args.db}"')
        _migrate(url)
    db = Database.from_url(url)
    try:
        if args.seed:
            t = time.perf_counter()
            ref = seed_copy(db, url, 10, 5, args.workloads, 5)
            print(f"seeded {args.db} ({ref}) in {time.perf_counter() - t:.0f} s")
            return
        with db.read() as session:
            newest = "select image || ':' || tag from releases order by id desc limit 1"
            ref = session.execute(text(newest)).scalar_one()
        cold = cold_comparison(db, ref)
        body = str(cold())  # the warm-up build: imports and first-call caches
        if args.json:
            with open(args.json, "w") as out:
                out.write(body)
        cpu, wall = [], []
        for _ in range(args.reps):
            t, c = time.perf_counter(), time.process_time()
            cold()
            wall.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
        reps = ", ".join(f"{x:.0f}" for x in cpu)
        where = next(iter(ablate.__path__))
        print(
            f"{args.db}: cold CPU median {statistics.median(cpu):.0f} ms ({reps}), "
            f"wall median {statistics.median(wall):.0f} ms, {len(body)} bytes; code from {where}"
        )
    finally:
        db.dispose()


if __name__ == "__main__":
    main()
