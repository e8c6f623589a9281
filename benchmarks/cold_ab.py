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
JSON, to ``cmp`` against another version's. ``--floors`` also times, in the same run, what no build
of today's answer can go below: the bare fetch of the rows it analyses (``report.py``'s
``floor_fetch``), making the answer's objects (unpickling a built comparison: the cheapest way to make
them) and writing its JSON (from those objects, as the API does). The code timed is whatever
``ablate`` imports: a ``git archive`` of another commit, unpacked in a folder named ``ablate`` under a
folder on ``PYTHONPATH``, times that commit.
"""

from __future__ import annotations

import argparse
import gc
import pickle
import statistics
import time
from collections.abc import Callable

import psycopg
from _db import ADMIN, _migrate
from report import cold_comparison, floor_fetch, seed_copy
from sqlalchemy import text

import ablate
from ablate.backend.db.database import Database
from ablate.backend.reports.json import render_json
from ablate.backend.services import comparison as svc


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", required=True, help="name of the kept database")
    parser.add_argument("--seed", action="store_true", help="(re)create and seed it, then stop")
    parser.add_argument("--workloads", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", help="write the comparison JSON here")
    parser.add_argument("--floors", action="store_true", help="time the answer's floors as well")
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
        if args.floors:
            _floors(db, ref, cold, args.reps)
            return
        wall, cpu = _times(cold, args.reps)
        reps = ", ".join(f"{x:.0f}" for x in cpu)
        where = next(iter(ablate.__path__))
        print(
            f"{args.db}: cold CPU median {statistics.median(cpu):.0f} ms ({reps}), "
            f"wall median {statistics.median(wall):.0f} ms, {len(body)} bytes; code from {where}"
        )
    finally:
        db.dispose()


def _times(fn: Callable[[], object], reps: int) -> tuple[list[float], list[float]]:
    """(wall, CPU of this process) of ``reps`` calls of ``fn``, milliseconds."""
    wall, cpu = [], []
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return wall, cpu


def _floors(db: Database, ref: str, cold: Callable[[], object], reps: int) -> None:
    """The cold build beside what no build of today's answer goes below, rep by rep in turn."""
    fetch = floor_fetch(db, ref)
    fetch()
    with db.read() as session:
        built = svc.build_release_comparison(session, ref)
    built.__dict__.pop("_texts", None)  # the JSON text a comparison keeps once written (model.json_text)
    blob = pickle.dumps(built, protocol=pickle.HIGHEST_PROTOCOL)
    del built
    made: list[object] = []

    def objects() -> None:
        made[:] = [pickle.loads(blob)]

    def write_json() -> None:
        render_json(made[0], indent=None)

    steps = {
        "cold build and JSON": cold,
        "floor 1: bare fetch of the rows": fetch,
        "floor 2: the answer's objects": objects,
        "floor 3: the answer's JSON": write_json,
    }
    times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in steps}
    for _ in range(reps):
        for name, step in steps.items():
            # A build pauses the collector (services/comparison/build.py); the floors run paused too, their
            # collection after the timing: a floor may read low, never high.
            if step is not cold:
                gc.disable()
            try:
                wall, cpu = _times(step, 1)
            finally:
                gc.enable()
            times[name][0].extend(wall)
            times[name][1].extend(cpu)
        made.clear()  # each rep's cold build starts from the heap a plain run of cold builds has
        gc.collect()
    total_wall = total_cpu = 0.0
    for name, (wall, cpu) in times.items():
        w, c = statistics.median(wall), statistics.median(cpu)
        if name.startswith("floor"):
            total_wall, total_cpu = total_wall + w, total_cpu + c
        each = ", ".join(f"{x:.0f}" for x in cpu)
        print(f"{name:34s} wall {w:8.0f} ms   CPU {c:8.0f} ms   (CPU each: {each})")
    print(f"{'floors together':34s} wall {total_wall:8.0f} ms   CPU {total_cpu:8.0f} ms")


if __name__ == "__main__":
    main()
