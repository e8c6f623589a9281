"""Dispatcher overhead: N trivial runs through the dispatcher and database versus N bare Ray tasks.

Both sides run on the same local Ray in one process. The bare side submits N tasks of a function that
returns a small dict and waits for all of them. The dispatcher side queues one study of N runs (through
``create_study``) whose runner does nothing, and drains it: claims, leases, preflight on the worker,
progress board, result recording through ``record_run_results`` and study status refresh, all included.
Each side is preceded by a warm-up so Ray's worker start-up is not counted on either: ``--warm-up``
bare tasks, and a study of ``--warm-up`` runs through the dispatcher that then drains the measured one
(20 by default; a fresh dispatcher drains its first few hundred runs more slowly than a long-lived
one, so ``--warm-up 500`` times the steady state a deployment's dispatcher runs in).

    .venv/bin/python benchmarks/dispatch.py                         # a fresh SQLite file, 500 runs
    .venv/bin/python benchmarks/dispatch.py --backend postgresql    # a fresh PostgreSQL database
    .venv/bin/python benchmarks/dispatch.py --runs 200 --concurrency 16

Exactly ``--runs`` runs are queued: 5 variants x runs/5 repeats, or fewer variants when 5 does not
divide the number.

Prints figures; not a test. Aim: the dispatcher costs no more than twice bare Ray.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ray
from _db import fresh_database

from ablate.backend.config import Settings
from ablate.backend.db import migrate
from ablate.backend.db.database import Database
from ablate.backend.db.models import Cluster, Run, Variant, Workload
from ablate.backend.domain.runner import ProgressCallback, RunResult, RunSpec, register_runner
from ablate.backend.schemas.catalog import ClusterDef, ReleaseCreate, VariantDef, WorkloadDef
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import catalog
from ablate.backend.services.studies import create_study
from ablate.workers.dispatch.dispatcher import Dispatcher


class NoopRunner:
    """A run that does nothing and reports one metric: what is left to measure is the dispatch."""

    name = "noop"

    def supported_factors(self, accelerator: str) -> set[str]:
        return set()

    def check_factors(self, factors: Iterable[str], accelerator: str) -> str | None:
        return None

    def run(self, spec: RunSpec, progress: ProgressCallback | None = None) -> RunResult:
        return RunResult(status="succeeded", metrics={"throughput_tokens_per_s": (1.0, "tokens/s")})


def register_noop() -> None:
    """Ray's worker setup hook: every worker process knows the noop runner by name, as a deployment's
    workers know Ablate's runners from their entry points (the path a run's runner takes there)."""
    register_runner("noop", NoopRunner)


def bare(i: int) -> dict[str, object]:
    return {"status": "succeeded", "metrics": {"throughput_tokens_per_s": [1.0, "tokens/s"]}, "i": i}


WARM_UP = 20  # runs and tasks before each side's measurement


def time_bare(n: int, warm_up: int = WARM_UP) -> tuple[float, float]:
    """Wall time and this process's CPU time (Ray's driver threads included) for ``n`` bare tasks."""
    task = ray.remote(num_cpus=1, max_retries=0)(bare)
    ray.get([task.remote(i) for i in range(warm_up)])  # warm-up: workers started
    t0, c0 = time.perf_counter(), time.process_time()
    ray.get([task.remote(i) for i in range(n)])
    return time.perf_counter() - t0, time.process_time() - c0


def _variants(n: int) -> int:
    """The most variants (up to 5) that divide ``n``, so that exactly ``n`` runs are queued."""
    return next(v for v in (5, 4, 3, 2, 1) if n % v == 0)


MAX_REPEATS = 100  # a plan's limit: larger queues spread over several workloads


def queue(database: Database, n: int, tag: str) -> int:
    variants = _variants(n)
    per_variant = max(1, n // variants)
    workloads = next(
        w for w in range(1, per_variant + 1) if per_variant % w == 0 and per_variant // w <= MAX_REPEATS
    )
    repeats = per_variant // workloads
    with database.transaction() as s:
        if catalog.find_release(s, "bench:1") is None:
            catalog.create_release(s, ReleaseCreate(image="bench", tag="1", platform="gpu"))
        catalog.resolve_named(s, Cluster, ClusterDef(name="bench-cpu", accelerator="cpu"), "cluster")
        for i in range(workloads):
            catalog.resolve_named(s, Workload, WorkloadDef(name=f"noop{i}", runner="noop"), "workload")
        for i in range(5):
            catalog.resolve_named(s, Variant, VariantDef(name=f"v{i}", position=i), "variant")
        plan = StudyPlan(
            name=f"bench-{tag}",
            release="bench:1",
            cluster="bench-cpu",
            variants=[f"v{i}" for i in range(variants)],
            workloads=[f"noop{i}" for i in range(workloads)],
            repeats=repeats,
            order_seed=1,
        )
        return create_study(s, plan).id


def time_dispatcher(
    database: Database, settings: Settings, n: int, by_object: bool = False, warm_up: int = WARM_UP
) -> tuple[float, float, int]:
    # By name (the default): the worker finds the runner in its registry, as in a deployment. By object:
    # the dispatcher is given the runner class, which travels to the workers through the object store
    # (what tests and embedders that pass runners use).
    d = Dispatcher(settings, database, runners={"noop": NoopRunner} if by_object else None)
    d.connect()
    queue(database, warm_up, "warm-up")
    d.drain(timeout_s=300)
    study = queue(database, n, "measured")
    t0, c0 = time.perf_counter(), time.process_time()
    d.drain(timeout_s=3600)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    d.shutdown()  # retired: the next measurement of a curve starts its own dispatcher
    with database.read() as s:
        done = s.query(Run).filter(Run.study_id == study, Run.status == "succeeded").count()
    return elapsed, cpu, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=64, help="the dispatcher's max_concurrent_runs")
    parser.add_argument(
        "--backend", choices=("sqlite", "postgresql"), default="sqlite", help="a fresh database of this kind"
    )
    parser.add_argument(
        "--runner-by",
        choices=("name", "object"),
        default="name",
        help="name: workers find the runner in their registry (a deployment's path); object: the "
        "dispatcher is given the runner class (tests' and embedders' path)",
    )
    parser.add_argument(
        "--warm-up", type=int, default=WARM_UP, help="bare tasks and dispatched runs before each timing"
    )
    args = parser.parse_args()
    if args.warm_up < 1:
        parser.error("--warm-up must be at least 1: Ray's workers start in the warm-up")
    logging.basicConfig(level=logging.WARNING)
    register_runner("noop", NoopRunner)  # create_study checks the runner by name

    with local_ray() as cpus, fresh_database(args.backend) as url:
        m = measure(
            url, args.runs, args.concurrency, by_object=args.runner_by == "object", warm_up=args.warm_up
        )
    n = args.runs
    print(
        f"database            {args.backend}   Ray CPUs {cpus}   concurrency {args.concurrency}   "
        f"runner by {args.runner_by}   warm-up {args.warm_up}"
    )
    print(f"bare Ray tasks      {n:5d} in {m.bare_s:7.2f} s   {n / m.bare_s:8.1f} tasks/s")
    print(f"dispatcher + db     {m.done:5d} in {m.disp_s:7.2f} s   {n / m.disp_s:8.1f} runs/s")
    if m.done != n:  # failed runs are quick: a ratio over them would flatter the dispatcher
        raise SystemExit(f"only {m.done} of {n} runs succeeded: no ratio (see the runs' errors)")
    print(f"ratio (dispatcher time / bare time per item)   {m.disp_s / m.bare_s:.2f}x")
    # Less sensitive to other load on the machine than wall time: what this process spent per item.
    print(
        f"driver CPU per item   bare {m.bare_cpu_s / n * 1e3:.2f} ms   "
        f"dispatcher {m.disp_cpu_s / n * 1e3:.2f} ms"
    )


@contextmanager
def local_ray() -> Iterator[int]:
    """A local Ray of this process's own (never another one on the machine); yields its CPU count."""
    if __name__ != "__main__":  # imported (benchmarks/scaling.py): workers cannot import this file
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(
        address="local",
        include_dashboard=False,
        log_to_driver=False,
        namespace="ablate-bench",
        runtime_env={"worker_process_setup_hook": register_noop},
    )
    try:
        yield int(ray.cluster_resources().get("CPU", 0))
    finally:
        ray.shutdown()


@dataclass(frozen=True)
class Measured:
    """Both sides of one measurement: wall and this process's CPU seconds, and the runs that succeeded."""

    bare_s: float
    bare_cpu_s: float
    disp_s: float
    disp_cpu_s: float
    done: int


def measure(
    url: str,
    runs: int,
    concurrency: int,
    *,
    bare_first: bool = True,
    by_object: bool = False,
    warm_up: int = WARM_UP,
) -> Measured:
    """Seconds for ``runs`` bare Ray tasks and for ``runs`` queued runs through the dispatcher (on the
    fresh database ``url``), and how many of those succeeded; ``bare_first`` orders the two sides,
    ``by_object`` gives the dispatcher the runner class (see :func:`time_dispatcher`), ``warm_up``
    tasks and runs precede each side's timing."""
    database = Database.from_url(url)
    migrate.upgrade(database.engine)
    settings = Settings(
        data_dir=Path(tempfile.mkdtemp(prefix="ablate-bench-")),
        database_url=url,
        max_concurrent_runs=concurrency,
        dispatcher_poll_s=0.05,
    )
    try:
        if bare_first:
            bare = time_bare(runs, warm_up)
            disp = time_dispatcher(database, settings, runs, by_object, warm_up)
        else:
            disp = time_dispatcher(database, settings, runs, by_object, warm_up)
            bare = time_bare(runs, warm_up)
    finally:
        database.dispose()
    return Measured(bare[0], bare[1], disp[0], disp[1], disp[2])


if __name__ == "__main__":
    main()
