"""Fixtures of the dispatcher tests: one fresh local Ray per test module, studies queued
through the real services, and settings with short leases."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ablate.backend.config import Settings
from ablate.backend.db.database import Database
from ablate.backend.db.models import Cluster, Run, Variant, Workload
from ablate.backend.domain.runner import register_runner
from ablate.backend.schemas.catalog import ClusterDef, ReleaseCreate, VariantDef, WorkloadDef
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import catalog
from ablate.backend.services.studies import create_study
from tests.workers.fakes import FakeRunner

# create_study asks the registry whether a runner exists; workers get the factory from the dispatcher.
register_runner("fake", FakeRunner)

RAY_LABELS = {"pool": "local"}


# Per module, not per session: a Ray left up in the process would show on pages that other tests
# expect without one (the clusters page), in whatever order pytest-xdist hands a worker its files.
@pytest.fixture(scope="module")
def ray_local() -> Iterator[str]:
    """A fresh local Ray (never an address: other engineers' Ray instances share this machine)."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    # address='local': a bare ray.init() joins any Ray already running on this machine.
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        namespace="ablate-tests",
        labels=RAY_LABELS,
        log_to_driver=False,
    )
    try:
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "lease_s": 3.0,
        "max_attempts": 3,
        "run_timeout_s": 120.0,
        "max_concurrent_runs": 2,
        "dispatcher_poll_s": 0.1,
        "retry_backoff_s": 0.2,  # the retry path, kept short
    }
    values.update(overrides)
    return Settings(**values)


@dataclass
class Queued:
    study_id: int
    run_ids: list[int]


def queue_study(
    database: Database,
    *,
    cluster: ClusterDef,
    variants: list[VariantDef],
    workloads: list[WorkloadDef],
    repeats: int = 1,
    seed: int = 7,
    release: ReleaseCreate | None = None,
) -> Queued:
    release = release or ReleaseCreate(image="training-nv-pytorch", tag="25.12", platform="gpu")
    with database.transaction() as s:
        if catalog.find_release(s, f"{release.image}:{release.tag}") is None:
            catalog.create_release(s, release)
        for model, entry in [
            (Cluster, cluster),
            *[(Variant, v) for v in variants],
            *[(Workload, w) for w in workloads],
        ]:
            catalog.resolve_named(s, model, entry, "test")
        plan = StudyPlan(
            release=f"{release.image}:{release.tag}",
            cluster=cluster.name,
            variants=[v.name for v in variants],
            workloads=[w.name for w in workloads],
            repeats=repeats,
            order_seed=seed,
        )
        study = create_study(s, plan)
        ids = [r.id for r in sorted(study.runs, key=lambda r: r.queue_order)]
        return Queued(study.id, ids)


def runs_of(database: Database, study_id: int) -> list[Run]:
    from sqlalchemy import select

    with database.read() as s:
        return list(s.scalars(select(Run).where(Run.study_id == study_id).order_by(Run.queue_order)))


CPU1 = ClusterDef(name="cpu-1", accelerator="cpu", nodes=1, devices_per_node=1)
FAKE = WorkloadDef(name="fake", runner="fake", runner_options={"steps": 3})


def run_own_ray(module: str, *args: str, timeout_s: float = 400.0) -> dict[str, Any]:
    """Run ``python -m tests.workers.<module> ARGS`` (a script that starts its own multi-node Ray: a
    second Ray cluster cannot share the test session's process); returns the JSON it printed last."""
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", f"tests.workers.{module}", *args],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    # the last JSON line: a node's raylet may print its state dump to stdout while it shuts down
    last = next(line for line in reversed(proc.stdout.splitlines()) if line.startswith("{"))
    result: dict[str, Any] = json.loads(last)
    return result


def start_ray_cluster(attempts: int = 3) -> Any:
    """A local multi-node Ray (``ray.cluster_utils.Cluster``) with a CPU-less head. Ray gives a starting
    node a fixed 30 s to register; on a loaded machine that can pass, so the start is tried again."""
    from ray.cluster_utils import Cluster as RayCluster

    for attempt in range(1, attempts + 1):
        try:
            return RayCluster(
                initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
            )
        except Exception as exc:  # Ray raises a bare Exception for this timeout
            if "timed out during startup" not in str(exc) or attempt == attempts:
                raise
            import psutil

            for child in psutil.Process().children(recursive=True):  # the half-started node's processes
                child.kill()
    raise AssertionError("unreachable")


@contextmanager
def own_ray(db_url: str, workers: list[dict[str, Any]], namespace: str) -> Iterator[tuple[Any, Database]]:
    """For the scripts run by :func:`run_own_ray`: a local Ray of a CPU-less head and ``workers`` (each
    ``add_node``'s arguments), this process connected to it, and the test's database; all torn down."""
    import ray

    nodes = start_ray_cluster()
    database = Database.from_url(db_url)
    try:
        for worker in workers:
            nodes.add_node(**worker)
        ray.init(address=nodes.address, namespace=namespace, log_to_driver=False)
        nodes.wait_for_nodes()
        yield nodes, database
    finally:
        database.dispose()
        ray.shutdown()
        nodes.shutdown()
