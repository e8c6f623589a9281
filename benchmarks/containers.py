"""Container overhead: a trivial run through Ablate inside its image, against a bare ``podman run`` of
the same image and command, and against the same run through Ablate on the host, in one process.

The image is built here (``podman import`` of a busybox rootfs whose ``ljperf`` prints a short log; the
test suite's builder), so nothing is pulled. Per round and side, ``--runs`` runs:

- bare: ``podman run --rm --net=host --ipc=host IMAGE ljperf`` one after the other (what the release
  notes' ``docker run`` costs by itself);
- Ablate, container: a study of ``--runs`` runs of that command in that image, drained by a dispatcher
  at concurrency 1 (claim, Ray task, image check, container, log parsing, recording);
- Ablate, host: the same study with the same script run on the host.

Rounds alternate which side goes first; the figures are medians over rounds of seconds per run.

    CONTAINERS_CONF=tests/support/containers.conf .venv/bin/python benchmarks/containers.py
    ... --runs 10 --rounds 3 --backend postgresql

Prints figures; not a test. Aim: Ablate in a container within 1.3x of a bare ``podman run``.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ray
from _db import fresh_database

from ablate.backend.config import Settings
from ablate.backend.db import migrate
from ablate.backend.db.database import Database
from ablate.backend.db.models import Cluster, Run, Variant, Workload
from ablate.backend.schemas.catalog import ClusterDef, ReleaseCreate, VariantDef, WorkloadDef
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import catalog
from ablate.backend.services.studies import create_study
from ablate.workers.dispatch.dispatcher import Dispatcher
from tests.support import images

PARSER = {
    "patterns": [{"regex": r"tokens/s: (?P<tps>\S+) \|", "metrics": {"tps": "throughput_tokens_per_s"}}]
}


def time_bare(podman: str, ref: str, runs: int) -> float:
    t0 = time.perf_counter()
    for _ in range(runs):
        subprocess.run([podman, "run", "--rm", "--net=host", "--ipc=host", ref, "ljperf"], check=True,
                       capture_output=True, timeout=300)  # fmt: skip
    return (time.perf_counter() - t0) / runs


def queue(
    database: Database, runs: int, name: str, *, image: str | None, command: list[str], env: dict[str, str]
) -> int:
    container = {"runtime": "podman"} if image else None
    with database.transaction() as s:
        if catalog.find_release(s, "bench-containers:1") is None:
            catalog.create_release(s, ReleaseCreate(image="bench-containers", tag="1", platform="gpu"))
        cluster = catalog.resolve_named(
            s, Cluster, ClusterDef(name=f"cpu-{name}", accelerator="cpu", container=container), "c"
        )
        catalog.resolve_named(s, Variant, VariantDef(name=f"v-{name}", image=image, env=env), "v")
        catalog.resolve_named(s, Workload, WorkloadDef(
            name=f"w-{name}", runner="command", parser="regex",
            runner_options={"command": command, "parser_options": PARSER}), "w")  # fmt: skip
        plan = StudyPlan(release="bench-containers:1", cluster=cluster.name, variants=[f"v-{name}"],
                         workloads=[f"w-{name}"], repeats=runs, order_seed=1)  # fmt: skip
        return create_study(s, plan).id


def time_ablate(database: Database, settings: Settings, runs: int, name: str, **kw: object) -> float:
    study = queue(database, runs, name, **kw)  # type: ignore[arg-type]
    d = Dispatcher(settings, database)
    d.connect()
    t0 = time.perf_counter()
    d.drain(timeout_s=1800)
    elapsed = time.perf_counter() - t0
    d.shutdown()
    with database.read() as s:
        done = s.query(Run).filter(Run.study_id == study, Run.status == "succeeded").count()
    if done != runs:
        raise SystemExit(f"{name}: only {done} of {runs} runs succeeded")
    return elapsed / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    images.podman_env()  # podman's settings for these machines (before Ray starts its workers)
    podman = shutil.which("podman")
    if podman is None:
        raise SystemExit("podman is not installed")
    work = Path(tempfile.mkdtemp(prefix="ablate-bench-containers-"))
    ref, _ = images.build_image(podman, work, "bench", 1000.0)
    script = work / "ljperf"
    script.write_text(images.LJPERF)
    script.chmod(0o755)
    sides: dict[str, list[float]] = {"bare": [], "container": [], "host": []}
    ray.init(address="local", include_dashboard=False, log_to_driver=False, namespace="ablate-bench")
    try:
        with fresh_database(args.backend) as url:
            database = Database.from_url(url)
            migrate.upgrade(database.engine)
            settings = Settings(
                data_dir=work / "data", database_url=url, max_concurrent_runs=1, dispatcher_poll_s=0.05
            )
            time_ablate(
                database, settings, 2, "warm", image=ref, command=["ljperf"], env={}
            )  # workers started
            for r in range(args.rounds):
                order = ["bare", "container", "host"] if r % 2 == 0 else ["host", "container", "bare"]
                for side in order:
                    if side == "bare":
                        sides[side].append(time_bare(podman, ref, args.runs))
                    elif side == "container":
                        sides[side].append(time_ablate(database, settings, args.runs, f"c{r}", image=ref,
                                                       command=["ljperf"], env={}))  # fmt: skip
                    else:
                        host_env = {"BENCH_SPEED": "1000"}
                        sides[side].append(time_ablate(database, settings, args.runs, f"h{r}", image=None,
                                                       command=[str(script)], env=host_env))  # fmt: skip
            database.dispose()
    finally:
        ray.shutdown()
        images.remove_images(podman, ref)
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in sides.items()}
    load = os.getloadavg()[0]
    print(
        f"runs per side and round {args.runs}, rounds {args.rounds}, database {args.backend}, load {load:.1f}"
    )
    for k, label in (
        ("bare", "bare podman run"),
        ("container", "Ablate, in the container"),
        ("host", "Ablate, on the host"),
    ):
        rounds = ", ".join(f"{v * 1e3:.0f}" for v in sides[k])
        print(f"{label:<28} {med[k] * 1e3:8.0f} ms per run   (rounds: {rounds})")
    print(
        f"ratio Ablate-in-container / bare podman run   {med['container'] / med['bare']:.2f}x   (aim <= 1.3x)"
    )
    print(f"ratio Ablate-in-container / Ablate-on-host    {med['container'] / med['host']:.2f}x")


if __name__ == "__main__":
    main()
