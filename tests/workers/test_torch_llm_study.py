"""End to end on a real local Ray with the real torch-llm runner: a tiny CNP-style study, a 2-rank
gloo data-parallel run, and killing a dispatcher in the middle of a study."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from sqlalchemy import func, select

from ablate.backend.db.database import Database
from ablate.backend.db.models import RunMetric, Study
from ablate.backend.schemas.catalog import ClusterDef, VariantDef, WorkloadDef
from ablate.workers.dispatch.dispatcher import Dispatcher
from tests.workers.conftest import CPU1, make_settings, queue_study, runs_of
from tests.workers.test_faults import wait_for

pytestmark = pytest.mark.slow

TINY = {"model": "tiny", "runner": "torch-llm", "seq_len": 32, "micro_batch": 2, "precision": "fp32"}
LADDER = [
    VariantDef(name="eager", position=0),
    VariantDef(name="compile", position=1, factors=["compiler_opt"]),
    VariantDef(name="checkpoint", position=2, factors=["ckpt_opt"], env={"CHECKPOINT_OPTIMIZATION": "true"}),
    VariantDef(name="both", position=3, factors=["compiler_opt", "ckpt_opt"],
               env={"CHECKPOINT_OPTIMIZATION": "true"}),
]  # fmt: skip


# Bounds, not speed checks: torch.compile's C++ build took over 120 s a run at load 11 on 2 cores.
@pytest.mark.timeout(1500)
def test_tiny_study_end_to_end(ray_local: str, database: Database, tmp_path: Path) -> None:
    wl = WorkloadDef(name="tiny-e2e", warmup_steps=1, measured_steps=1, **TINY)  # type: ignore[arg-type]
    q = queue_study(database, cluster=CPU1, variants=LADDER, workloads=[wl], repeats=2, seed=11)
    settings = make_settings(tmp_path, max_concurrent_runs=2, run_timeout_s=600.0)
    Dispatcher(settings, database).drain(timeout_s=1400)
    runs = runs_of(database, q.study_id)
    assert [(r.status, r.error) for r in runs] == [("succeeded", None)] * 8
    with database.read() as s:
        study = s.get(Study, q.study_id)
        assert study is not None and study.status == "succeeded"
        names = {
            v: n for v, n in s.execute(select(RunMetric.run_id, func.count()).group_by(RunMetric.run_id))
        }
        variants = {r.id: s.get(type(r), r.id).variant.name for r in runs}  # type: ignore[union-attr]
    assert all(names[r.id] >= 5 for r in runs)  # every run recorded its summary metrics
    for r in runs:
        v = variants[r.id]
        assert r.total_steps == 2 and r.current_step == 2
        assert r.environment.get("CHECKPOINT_OPTIMIZATION") == (
            "true" if v in ("checkpoint", "both") else None
        )
        assert r.provenance["dispatcher"] and r.provenance["host"]
        assert ("torch.compile" in r.provenance.get("compile", "")) == (v in ("compile", "both"))
    # repeats interleaved: every variant's first repeat is queued before any second repeat
    assert [r.repeat for r in runs] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_two_rank_gloo_data_parallel_run(ray_local: str, database: Database, tmp_path: Path) -> None:
    cluster = ClusterDef(name="cpu-2", accelerator="cpu", nodes=1, devices_per_node=2)
    wl = WorkloadDef(name="tiny-dp2", warmup_steps=1, measured_steps=2, **TINY)  # type: ignore[arg-type]
    q = queue_study(database, cluster=cluster, variants=[LADDER[0]], workloads=[wl])
    Dispatcher(make_settings(tmp_path), database).drain(timeout_s=200)
    (run,) = runs_of(database, q.study_id)
    assert (run.status, run.error) == ("succeeded", None)
    assert run.provenance.get("distributed_backend") == "gloo"
    env = run.environment
    assert env["WORLD_SIZE"] == "2" and env["RANK"] == "0" and env["LOCAL_RANK"] == "0"
    assert env["MASTER_ADDR"] and int(env["MASTER_PORT"]) > 0


def _children_of_run(run_id: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "ablate.workers.runners.torch_llm" in cmd and f"run-{run_id}.work" in cmd:
            out.append(p)
    return out


def test_kill_dispatcher_mid_study_and_recover(
    ray_local: str, database: Database, db_url: str, tmp_path: Path
) -> None:
    # long enough (a few seconds of steps) to be caught in the middle, short enough to re-run
    wl = WorkloadDef(name="tiny-long", warmup_steps=1, measured_steps=1500, **TINY)  # type: ignore[arg-type]
    q = queue_study(database, cluster=CPU1, variants=LADDER[:1], workloads=[wl], repeats=3)
    env = {
        **os.environ,
        "ABLATE_DATABASE_URL": db_url,
        "ABLATE_RAY_ADDRESS": ray_local,
        "ABLATE_DATA_DIR": str(tmp_path),
        "ABLATE_LEASE_S": "3",
        "ABLATE_MAX_CONCURRENT_RUNS": "1",
        "ABLATE_DISPATCHER_POLL_S": "0.2",
    }
    log = open(tmp_path / "dispatcher.log", "w")  # noqa: SIM115 - closed below
    argv = [sys.executable, "-m", "ablate.backend.cli.main", "dispatcher"]
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        first = q.run_ids[0]

        def mid_run() -> bool:
            run = runs_of(database, q.study_id)[0]
            # progress is written at most once a second: any step short of the last is mid-run
            return run.status == "running" and 1 <= (run.current_step or 0) < 1501

        try:
            wait_for(mid_run, 120, "the first run to make progress")
        except AssertionError:
            log.flush()
            print((tmp_path / "dispatcher.log").read_text()[-5000:])
            raise
        if not _children_of_run(first):
            for p in psutil.process_iter(["cmdline"]):
                print(p.pid, " ".join(p.info["cmdline"] or [])[:200])
            print(runs_of(database, q.study_id)[0].__dict__)
            raise AssertionError("no torch-llm child of the running run")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    # Ray kills the dead driver's worker; the worker's reaper kills the torch-llm child.
    wait_for(lambda: not _children_of_run(first), 30, "the orphaned runner child to die")
    assert runs_of(database, q.study_id)[0].status == "running"  # its lease has not expired yet
    time.sleep(3.5)
    Dispatcher(make_settings(tmp_path, lease_s=3.0, max_concurrent_runs=1), database).drain(timeout_s=300)
    runs = runs_of(database, q.study_id)
    assert [(r.status, r.attempt) for r in runs] == [("succeeded", 2), ("succeeded", 1), ("succeeded", 1)]
    with database.read() as s:
        counts = s.execute(select(RunMetric.run_id, RunMetric.name, func.count())
                           .group_by(RunMetric.run_id, RunMetric.name)).all()  # fmt: skip
        assert {n for _, _, n in counts} == {1}  # each result recorded exactly once
        study = s.get(Study, q.study_id)
        assert study is not None and study.status == "succeeded"
