"""Faults on a real local Ray: crashed workers are retried, benchmark failures are not, impossible runs
fail fast, cancel kills the runner's processes, a dispatcher that lost its lease records nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import psutil
from sqlalchemy import update

from ablate.backend.db.database import Database
from ablate.backend.db.models import Run, RunMetric, Study
from ablate.backend.schemas.catalog import ClusterDef, VariantDef, WorkloadDef
from ablate.backend.services import run_logs
from ablate.backend.services.studies import cancel_study
from ablate.workers.dispatch.dispatcher import Dispatcher
from tests.workers.conftest import CPU1, make_settings, queue_study, runs_of
from tests.workers.fakes import FakeRunner

FAKES = {"fake": FakeRunner}


def wait_for(cond: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _one(database: Database, options: dict[str, object], cluster: ClusterDef = CPU1) -> int:
    wl = WorkloadDef(name=f"fake-{abs(hash(str(options))) % 10**8}", runner="fake", runner_options=options)
    return queue_study(database, cluster=cluster, variants=[VariantDef(name="A")], workloads=[wl]).study_id


def test_crashed_worker_is_retried_with_next_attempt(
    ray_local: str, database: Database, tmp_path: Path
) -> None:
    study = _one(database, {"crash_once": str(tmp_path / "crashed")})
    Dispatcher(make_settings(tmp_path), database, runners=FAKES).drain(timeout_s=90)
    (run,) = runs_of(database, study)
    assert (run.status, run.attempt, run.error) == ("succeeded", 2, None)
    assert (tmp_path / "crashed").exists()
    # each attempt kept its own log file, and the retried one says why it did not finish the run
    with database.read() as session:
        found = run_logs.attempts(session, run.id, make_settings(tmp_path).log_dir)
    outcomes = [(a.attempt, a.current, a.outcome) for a in found]
    assert outcomes == [(1, False, "retried"), (2, True, "succeeded")]
    assert str(found[0].reason).startswith("attempt 1 failed (") and "queued again" in str(found[0].reason)
    for a in found:
        assert [f["name"] for f in a.files] == ["node0.log"]
        with database.read() as session:
            path = run_logs.log_file(session, run.id, "node0.log", make_settings(tmp_path).log_dir, a.attempt)
        assert path.read_text() == f"fake run {run.id} attempt {a.attempt}\n"


def test_crash_every_attempt_fails_with_the_reason(
    ray_local: str, database: Database, tmp_path: Path
) -> None:
    # max_attempts=1: the first infrastructure failure is final
    study = _one(database, {"crash_once": str(tmp_path / "crashed-1")})
    Dispatcher(make_settings(tmp_path, max_attempts=1), database, runners=FAKES).drain(timeout_s=60)
    (run,) = runs_of(database, study)
    assert run.status == "failed" and run.failure_kind == "infrastructure"
    assert "Ray worker crashed or was killed" in str(run.error) and "after 1 attempt" in str(run.error)


def test_an_actor_unavailable_under_a_run_is_an_infrastructure_failure_and_retried(
    ray_local: str, database: Database, tmp_path: Path
) -> None:
    study = _one(database, {"actor_unavailable_once": str(tmp_path / "raised")})
    Dispatcher(make_settings(tmp_path), database, runners=FAKES).drain(timeout_s=90)
    (run,) = runs_of(database, study)
    assert (run.status, run.attempt, run.error) == ("succeeded", 2, None)
    assert (tmp_path / "raised").exists()


def test_a_single_node_run_ray_cannot_start_fails_after_the_placement_timeout(
    ray_local: str, database: Database, tmp_path: Path
) -> None:
    import ray

    started = tmp_path / "blocker-started"

    @ray.remote(num_cpus=2)  # every CPU of the test session's Ray
    def blocker() -> None:
        started.write_text("holding")
        time.sleep(600)

    held = blocker.remote()
    try:
        wait_for(started.exists, 60, "the blocker to start")
        study = _one(database, {"steps": 1})
        settings = make_settings(tmp_path, placement_timeout_s=2.0)
        Dispatcher(settings, database, runners=FAKES).drain(timeout_s=90)
    finally:
        ray.cancel(held, force=True)
    (run,) = runs_of(database, study)
    assert (run.status, run.failure_kind, run.attempt) == ("failed", "infrastructure", 1)
    assert str(run.error).startswith(
        "not started within 2 s (ABLATE_PLACEMENT_TIMEOUT_S) + 30 s for its worker to start: "
        "cluster 'cpu-1' needs 1 CPU on each of 1 node(s); "
        "enough alive nodes have these resources, but not free at the same time (held by other work)"
    )


def test_benchmark_failure_is_not_retried(ray_local: str, database: Database, tmp_path: Path) -> None:
    study = _one(database, {"fail": True})
    Dispatcher(make_settings(tmp_path), database, runners=FAKES).drain(timeout_s=60)
    (run,) = runs_of(database, study)
    assert (run.status, run.attempt, run.failure_kind) == ("failed", 1, "benchmark")
    assert run.error == "the benchmark failed by itself"


def test_unplaceable_run_fails_fast_naming_the_missing_resource(
    ray_local: str, database: Database, tmp_path: Path
) -> None:
    ppu = ClusterDef(name="ppu-16", accelerator="ppu", nodes=2, devices_per_node=16, labels={"pool": "local"})
    study = _one(database, {}, cluster=ppu)
    t0 = time.monotonic()
    Dispatcher(make_settings(tmp_path), database, runners=FAKES).drain(timeout_s=30)
    assert time.monotonic() - t0 < 10
    (run,) = runs_of(database, study)
    assert run.status == "failed" and run.attempt == 1
    assert run.error == (
        "unplaceable: cluster 'ppu-16' needs 16 PPU on each of 2 node(s) with label pool=local; "
        "the Ray cluster has no node with resource 'PPU'"
    )


def test_progress_is_visible_while_running(ray_local: str, database: Database, tmp_path: Path) -> None:
    # 30 steps over ~12 s: progress is published about once a second, and on a loaded machine
    # (CI shares 2 cores) a 4 s run could finish before any partial report was read.
    study = _one(database, {"steps": 30, "step_s": 0.4})
    d = Dispatcher(make_settings(tmp_path), database, runners=FAKES)
    d.start()
    seen: set[int] = set()
    study_statuses: set[str] = set()
    try:

        def progressed() -> bool:
            (run,) = runs_of(database, study)
            if run.status == "running" and run.current_step:
                seen.add(run.current_step)
                assert run.total_steps == 30 and run.latest_throughput
                with database.read() as s:
                    found = s.get(Study, study)
                    assert found is not None
                # Only a study read between two reads of its run as running counts: the run may
                # finish (and the study with it) between the reads.
                (after,) = runs_of(database, study)
                if after.status == "running":
                    study_statuses.add(found.status)
            return run.status == "succeeded"

        wait_for(progressed, 180, "the run to finish")
    finally:
        d.stop()
    assert seen and min(seen) < 30  # a partial step count was visible before the end
    assert study_statuses == {"running"}  # the study says so while its run executes


def test_cancel_stops_the_run_and_kills_its_child(ray_local: str, database: Database, tmp_path: Path) -> None:
    study = _one(database, {"child": True})
    d = Dispatcher(make_settings(tmp_path), database, runners=FAKES)
    d.start()
    try:
        child_file = tmp_path / "logs" / f"run-{runs_of(database, study)[0].id}.child"
        wait_for(child_file.exists, 60, "the runner's child")
        child = psutil.Process(int(child_file.read_text()))
        assert child.is_running()
        with database.transaction() as s:
            cancel_study(s, study)
        child.wait(timeout=60)  # killed by the worker's reaper after ray.cancel(force=True)
        wait_for(lambda: not d.executions, 60, "the execution to be dropped")
    finally:
        d.stop()
    (run,) = runs_of(database, study)
    assert run.status == "cancelled"
    with database.read() as s:
        assert s.query(RunMetric).filter_by(run_id=run.id).count() == 0


def test_dispatcher_that_lost_its_lease_records_nothing(
    ray_local: str, database: Database, tmp_path: Path
) -> None:
    study = _one(database, {"steps": 3, "step_s": 1.0})
    d = Dispatcher(make_settings(tmp_path), database, runners=FAKES)
    d.connect()
    wait_for(lambda: bool(d.step()) and bool(d.executions), 30, "a claim")
    (run_id,) = list(d.executions)
    with database.transaction() as s:  # another dispatcher took the run over after our lease expired
        s.execute(update(Run).where(Run.id == run_id).values(lease_owner="someone-else"))
    d._next_tick = 0  # the next step renews at once
    wait_for(lambda: (d.step(), not d.executions)[1], 60, "the execution to stop")
    (run,) = runs_of(database, study)
    assert run.status == "running" and run.lease_owner == "someone-else"
    with database.read() as s:
        assert s.query(RunMetric).filter_by(run_id=run_id).count() == 0


def test_a_log_directory_that_cannot_be_written_is_an_infrastructure_failure_retried(
    ray_local: str, database: Database, tmp_path: Path
) -> None:
    """The run's log cannot be written (here a data directory under a regular file: refused for root
    too, where a read-only mode is not): the node's disk, not the benchmark, so every attempt is used."""
    study = _one(database, {"write_log": True})
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the data directory's parent should be")
    settings = make_settings(blocker / "data", max_attempts=2)
    Dispatcher(settings, database, runners=FAKES).drain(timeout_s=90)
    (run,) = runs_of(database, study)
    assert (run.status, run.failure_kind, run.attempt) == ("failed", "infrastructure", 2), run.error
    assert run.error is not None and "refused a write" in run.error and "Not a directory" in run.error


def test_a_disk_fault_that_clears_during_the_backoff_lets_the_retry_succeed(
    ray_local: str, database: Database, tmp_path: Path
) -> None:
    """An infrastructure failure waits before its retry (doubling from ``retry_backoff_s``), holding
    the run and saying so on it: a disk that refused the log (a data directory under a regular file,
    refused for root too) and is repaired meanwhile costs one attempt, not the run. Without the delay
    every attempt failed within a second."""
    study = _one(database, {"write_log": True, "steps": 1})
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the data directory's parent should be")
    settings = make_settings(blocker / "data", max_attempts=3, retry_backoff_s=10.0)
    dispatcher = Dispatcher(settings, database, runners=FAKES)
    dispatcher.start()
    try:
        wait_for(
            lambda: "retrying in 10 s" in str(runs_of(database, study)[0].error),
            90,
            "the first attempt to fail and wait",
        )
        (run,) = runs_of(database, study)
        assert (run.status, run.attempt) == ("running", 1), run.error
        assert "refused a write" in str(run.error) and str(run.error).startswith("attempt 1 failed (")
        blocker.unlink()  # the fault clears
        blocker.mkdir()
        # the retry goes back to the queue (attempt 2) before it is claimed again: wait for its end
        ended = ("succeeded", "failed", "cancelled")
        wait_for(lambda: runs_of(database, study)[0].status in ended, 120, "the retry to finish")
    finally:
        dispatcher.stop()
    (run,) = runs_of(database, study)
    # attempt 2 unless the repair above came after its 10 s (a loaded machine): then attempt 3, 20 s on
    assert run.status == "succeeded" and run.attempt in (2, 3) and run.error is None, run.error
    assert (blocker / "data" / "logs").is_dir()
