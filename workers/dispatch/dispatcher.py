"""The dispatcher: claims queued runs, executes them on Ray, and records their results through ingest.

One loop, one thread, no SQL in Ray. Each iteration it

1. every tick (about once a second) renews the leases of its in-flight runs in one UPDATE, writes
   their latest progress, and stops any run the UPDATE no longer matched (cancelled, or its lease
   lost); every ``lease_s / 3`` it also re-queues runs of dead dispatchers whose lease expired;
2. waits briefly on Ray for finished node tasks;
3. in one transaction, records the runs that finished as one batch through
   :func:`ablate.backend.services.ingest.record_run_results` (guarded by their leases), then claims as many
   queued runs as it has free slots (``max_concurrent_runs``), in ``queue_order``; after the commit it
   checks that the Ray cluster could ever place each claimed run (else it fails at once, naming what
   is missing), and submits it: one task per node, in a STRICT_SPREAD placement group for multi-node.

Infrastructure failures (crashed or killed worker, OOM, failed preflight) go back to the queue with
``attempt + 1`` until ``max_attempts``; a benchmark that failed by itself, or timed out, is recorded.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from ablate.backend.config import Settings
from ablate.backend.db.base import utcnow
from ablate.backend.db.database import Database
from ablate.backend.db.models import Run
from ablate.backend.domain.placement import NodeDemand, NodeInfo, demand_for, unplaceable_reason
from ablate.backend.domain.runner import Runner, RunResult, RunSpec
from ablate.backend.services.ingest import FinishedRun, InvalidResults, record_run_results
from ablate.backend.services.studies import refresh_study_statuses
from ablate.workers.dispatch import claims, ray_runtime
from ablate.workers.envrules import plan_environment

log = logging.getLogger(__name__)

TICK_S = 1.0  # progress and lease renewal at most once a second
NODES_CACHE_S = 2.0
TIMEOUT_GRACE_S = 300.0  # backstop beyond the runner's own timeout (start-up, queueing in Ray)


def dispatcher_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class Outcome:
    """What to do with a finished execution, applied in the next recording transaction."""

    run_id: int
    result: RunResult
    started_at: datetime | None
    finished_at: datetime | None
    attempt: int
    retryable: bool = False
    progress: tuple[int, int, float | None] | None = None  # the runner's last report


@dataclass
class Execution:
    run_id: int
    attempt: int
    spec: RunSpec
    demand: NodeDemand
    checks: dict[str, Any]
    runtime_env: dict[str, Any] | None
    provenance: dict[str, str]
    deadline: float
    phase: str = "running"  # "placing" -> "rendezvous" -> "running"
    pg: Any = None
    waiting: list[Any] = field(default_factory=list)
    node_refs: list[Any] = field(default_factory=list)
    node_results: dict[int, dict[str, Any]] = field(default_factory=dict)
    failure: RunResult | None = None


def _columns(obj: Any, exclude: tuple[str, ...] = ("id", "created_at")) -> dict[str, Any]:
    return {c.key: getattr(obj, c.key) for c in obj.__table__.columns if c.key not in exclude}


def _parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        database: Database,
        *,
        owner: str | None = None,
        runners: Mapping[str, Callable[[], Runner]] | None = None,
        cluster_names: list[str] | None = None,
    ) -> None:
        self.settings = settings
        self.database = database
        self.owner = owner or dispatcher_id()
        self.runners = dict(runners or {})
        self.cluster_names = cluster_names
        self.executions: dict[int, Execution] = {}
        self._ref_owner: dict[Any, int] = {}
        self._outcomes: list[Outcome] = []
        self._next_tick = 0.0
        self._next_reap = 0.0
        self._nodes: tuple[float, list[NodeInfo]] = (0.0, [])
        self._board: Any = None
        self._progress_ref: Any = None
        self._factory_refs: dict[str, Any] = {}
        self._node_task: Any = None
        self._rendezvous: Any = None
        self._ray_address = ""
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # --- lifecycle --------------------------------------------------------------------------------

    def connect(self) -> None:
        if self._node_task is not None:
            return
        self._ray_address = ray_runtime.ensure_ray(self.settings)
        self._node_task = ray_runtime.remote_node_task()
        self._rendezvous = ray_runtime.remote_rendezvous()
        self._board = ray_runtime.start_board()
        log.info("dispatcher %s serving Ray at %s", self.owner, self._ray_address)

    @property
    def ray_address(self) -> str:
        return self._ray_address

    def run_forever(self, stop: threading.Event | None = None) -> None:
        stop = stop or self._stop
        self.connect()
        try:
            while not stop.is_set():
                if not self.step(wait_s=min(0.2, self.settings.dispatcher_poll_s)):
                    stop.wait(self.settings.dispatcher_poll_s)
        finally:
            self.shutdown()

    def start(self) -> None:
        """Run in a background thread (the in-process dispatcher of ``ablate serve``)."""
        self.connect()
        self._stop.clear()
        self._thread = threading.Thread(target=self.run_forever, name="ablate-dispatcher", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def shutdown(self) -> None:
        """Record what finished already; stop every in-flight run and give it back to the queue (same
        attempt: not its fault)."""
        if self._outcomes:
            outcomes, self._outcomes = self._outcomes, []
            with self.database.transaction() as session:
                refresh_study_statuses(session, self._record(session, outcomes))
        if not self.executions:
            return
        for ex in list(self.executions.values()):
            self._kill(ex)
        with self.database.transaction() as session:
            for run_id in list(self.executions):
                claims.requeue(
                    session, self.owner, run_id, reason="dispatcher stopped; queued again", next_attempt=False
                )
        self.executions.clear()
        self._ref_owner.clear()

    def drain(self, timeout_s: float = 600.0, *, until: Callable[[], bool] | None = None) -> None:
        """Run the loop until nothing is queued or in flight (tests, benchmarks, ``--exit-when-idle``)."""
        self.connect()
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            busy = self.step(wait_s=0.2)
            if until is not None and until():
                return
            if not busy and not self.executions and not self._queued_left():
                return
            if not busy:
                time.sleep(min(0.2, self.settings.dispatcher_poll_s))
        raise TimeoutError(f"dispatcher did not drain within {timeout_s:g} s")

    def _queued_left(self) -> bool:
        with self.database.read() as session:
            return session.scalar(select(Run.id).where(Run.status == claims.QUEUED).limit(1)) is not None

    # --- one iteration ----------------------------------------------------------------------------

    def step(self, wait_s: float = 0.2) -> bool:
        """One loop iteration; returns whether anything happened or is in flight."""
        now = time.monotonic()
        if now >= self._next_tick:
            self._tick(now)
        self._wait_ray(wait_s if self.executions else 0.0)
        self._check_deadlines()
        recorded, claimed = self._record_and_claim()
        return bool(recorded or claimed or self.executions)

    def _tick(self, now: float) -> None:
        self._next_tick = now + TICK_S
        progress = self._take_progress()
        held: set[int] = set()
        with self.database.transaction() as session:
            # Renew before reaping: a loop that stalled past lease_s must not re-queue its own runs.
            if self.executions:
                held = claims.renew_leases(
                    session, self.owner, list(self.executions), lease_s=self.settings.lease_s
                )
                for run_id, (step, total, tput) in progress.items():
                    if run_id in held:
                        claims.write_progress(session, self.owner, run_id, step, total, tput)
            if now >= self._next_reap:
                self._next_reap = now + max(0.5, self.settings.lease_s / 3)
                reaped = claims.reap_expired(session, max_attempts=self.settings.max_attempts)
                refresh_study_statuses(session, reaped.study_ids)
                if reaped.requeued or reaped.failed:
                    log.warning("expired leases: requeued %s, failed %s", reaped.requeued, reaped.failed)
        for run_id in [r for r in self.executions if r not in held]:
            ex = self.executions[run_id]
            log.info("run %s is no longer ours (cancelled or lease lost): stopping it", run_id)
            self._kill(ex)
            self._forget(ex)

    def _take_progress(self) -> dict[int, tuple[int, int, float | None]]:
        """The board's latest reports, without ever blocking the loop (leases must not wait on it)."""
        import ray

        out: dict[int, tuple[int, int, float | None]] = {}
        pending = self._progress_ref
        if pending is not None:
            ready, _ = ray.wait([pending], timeout=0)
            if not ready:
                return out
            try:
                out = ray.get(pending)
            except Exception as exc:  # progress is best effort; leases are not
                log.warning("progress board unavailable: %s", exc)
        self._progress_ref = self._board.take.remote() if self.executions and self._board else None
        return out

    # --- claiming and submitting ------------------------------------------------------------------

    def _record_and_claim(self) -> tuple[int, int]:
        """One transaction: record the finished runs, then claim as many queued runs as there are free
        slots; submit those to Ray once it committed. Returns (recorded, claimed)."""
        outcomes, self._outcomes = self._outcomes, []
        free = self.settings.max_concurrent_runs - len(self.executions)
        if not outcomes and free <= 0:
            return 0, 0
        try:
            with self.database.transaction() as session:
                studies = self._record(session, outcomes) if outcomes else set()
                prepared, claimed_studies = self._claim(session, free) if free > 0 else ([], set())
                # Once for both: a study is "running" from its first claimed run, and finished with
                # its last recorded one.
                refresh_study_statuses(session, studies | claimed_studies)
        except BaseException:
            self._outcomes = outcomes + self._outcomes  # not recorded: try again next iteration
            raise
        for ex in prepared:
            self._submit(ex)
        return len(outcomes), len(prepared)

    def _claim(self, session: Session, free: int) -> tuple[list[Execution], set[int]]:
        got = claims.claim_runs(
            session,
            self.owner,
            limit=free,
            lease_s=self.settings.lease_s,
            ray_address=self.settings.ray_address,
            cluster_names=self.cluster_names,
        )
        if not got:
            return [], set()
        runs = session.scalars(
            select(Run)
            .options(
                joinedload(Run.variant),
                joinedload(Run.workload),
                joinedload(Run.cluster),
                joinedload(Run.release),
            )
            .where(Run.id.in_([c.run_id for c in got]))
        ).all()
        by_id = {r.id: r for r in runs}
        prepared = [self._prepare(by_id[c.run_id]) for c in got]
        return prepared, {r.study_id for r in runs if r.study_id is not None}

    def _prepare(self, run: Run) -> Execution:
        workload, variant, cluster, release = (
            _columns(run.workload),
            _columns(run.variant),
            _columns(run.cluster),
            _columns(run.release),
        )
        workload["name"], variant["name"], cluster["name"] = (
            run.workload.name,
            run.variant.name,
            run.cluster.name,
        )
        env = plan_environment(variant, release, cluster)
        demand = demand_for(cluster)
        opts = {**(workload.get("runner_options") or {}), **(variant.get("runner_options") or {})}
        timeout_s = float(opts.get("timeout_s") or self.settings.run_timeout_s)
        spec = RunSpec(
            run_id=run.id,
            workload=workload,
            variant=variant,
            cluster=cluster,
            env=env.env,
            log_dir=str(self.settings.log_dir),
            timeout_s=timeout_s,
            local_world_size=demand.ranks_per_node if demand.nodes == 1 else 1,
        )
        manifest = release.get("manifest") or {}
        checks = {
            "accelerator": demand.accelerator,
            "expected_devices": 0 if demand.accelerator == "cpu" else demand.ranks_per_node,
            "driver_requirements": release.get("driver_requirements") or {},
            "cuda_version": opts.get("cuda_version") or manifest.get("cuda"),
        }
        if "min_free_fraction" in opts:
            checks["min_free_fraction"] = float(opts["min_free_fraction"])
        image = variant.get("image")
        runtime_env = {"image_uri": image, "env_vars": dict(env.env)} if image else None
        provenance = {
            "dispatcher": self.owner,
            "attempt": str(run.attempt),
            "release": run.release.ref,
            "ray_demand": demand.describe(),
            **env.provenance(),
        }
        if image:
            provenance["image"] = str(image)
        return Execution(
            run_id=run.id,
            attempt=run.attempt,
            spec=spec,
            demand=demand,
            checks=checks,
            runtime_env=runtime_env,
            provenance=provenance,
            deadline=time.monotonic() + timeout_s + TIMEOUT_GRACE_S,
        )

    def alive_nodes(self) -> list[NodeInfo]:
        at, nodes = self._nodes
        if time.monotonic() - at > NODES_CACHE_S:
            nodes = ray_runtime.alive_nodes()
            self._nodes = (time.monotonic(), nodes)
        return nodes

    def _submit(self, ex: Execution) -> None:
        self.executions[ex.run_id] = ex
        reason = unplaceable_reason(ex.demand, self.alive_nodes())
        if reason:
            # Not retried: more attempts cannot create a missing resource.
            self._finish(ex, RunResult.failed(f"unplaceable: {reason}", "infrastructure"), retryable=False)
            return
        if ex.demand.nodes == 1:
            # Shallow: Ray serialises the task's arguments anyway (``asdict`` would deep-copy first).
            self._launch_nodes(ex, [[dict(vars(ex.spec))]])
            return
        from ray.util.placement_group import placement_group

        ex.pg = placement_group(
            ex.demand.bundles(),
            strategy="STRICT_SPREAD",
            name=f"ablate-run-{ex.run_id}",
            bundle_label_selector=ex.demand.bundle_label_selector(),
        )
        ex.phase = "placing"
        self._await(ex, ex.pg.ready())

    def _await(self, ex: Execution, ref: Any) -> None:
        ex.waiting.append(ref)
        self._ref_owner[ref] = ex.run_id

    def _node_options(self, ex: Execution, index: int) -> dict[str, Any]:
        opts: dict[str, Any] = {"name": f"ablate-run-{ex.run_id}-node{index}"}
        if ex.pg is None:
            opts.update(ex.demand.task_options())
        else:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            res = ex.demand.task_options()
            res.pop("label_selector", None)  # the bundle already carries it
            opts.update(res)
            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                ex.pg, placement_group_bundle_index=index
            )
        if ex.runtime_env:
            opts["runtime_env"] = ex.runtime_env
        return opts

    def _launch_nodes(self, ex: Execution, per_node: list[list[dict[str, Any]]]) -> None:
        ex.phase = "running"
        factory = self._factory_ref(ex.spec.runner_name)
        for index, specs in enumerate(per_node):
            ref = self._node_task.options(**self._node_options(ex, index)).remote(
                specs, ex.checks, self._board, factory
            )
            ex.node_refs.append(ref)
            self._await(ex, ref)

    def _factory_ref(self, name: str) -> Any:
        """A runner factory given to this dispatcher, put in Ray's object store once (not pickled
        into every task); None lets the worker look the runner up in its own registry."""
        if name not in self.runners:
            return None
        if name not in self._factory_refs:
            import ray

            self._factory_refs[name] = ray.put(self.runners[name])
        return self._factory_refs[name]

    # --- waiting on Ray ---------------------------------------------------------------------------

    def _wait_ray(self, wait_s: float) -> None:
        pending = list(self._ref_owner)
        if not pending:
            return
        import ray

        ready, _ = ray.wait(pending, num_returns=1, timeout=wait_s, fetch_local=False)
        if ready:
            ready, _ = ray.wait(pending, num_returns=len(pending), timeout=0, fetch_local=False)
        for ref in ready:
            run_id = self._ref_owner.pop(ref, None)
            ex = self.executions.get(run_id) if run_id is not None else None
            if ex is None:
                continue
            ex.waiting.remove(ref)
            self._on_ready(ex, ref)

    def _on_ready(self, ex: Execution, ref: Any) -> None:
        import ray

        if ex.phase == "placing":
            ex.phase = "rendezvous"
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            strategy = PlacementGroupSchedulingStrategy(ex.pg, placement_group_bundle_index=0)
            self._await(ex, self._rendezvous.options(scheduling_strategy=strategy).remote())
            return
        if ex.phase == "rendezvous":
            try:
                addr, port = ray.get(ref)
            except Exception as exc:
                self._finish(ex, RunResult.failed(f"rendezvous on node 0 failed: {exc}", "infrastructure"))
                return
            self._launch_nodes(ex, multi_node_specs(ex.spec, ex.demand, addr, int(port)))
            return
        index = ex.node_refs.index(ref)
        try:
            node = ray.get(ref)
        except Exception as exc:
            failure = RunResult.failed(describe_ray_failure(exc, index), "infrastructure")
            self._finish(ex, failure)
            return
        ex.node_results[index] = node
        res = RunResult.from_dict(node["result"])
        if not res.succeeded:
            self._finish(ex, res)
        elif len(ex.node_results) == len(ex.node_refs):
            self._finish(ex, RunResult.from_dict(ex.node_results[0]["result"]))

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for ex in [e for e in self.executions.values() if now > e.deadline]:
            msg = f"no result within {ex.spec.timeout_s:g} s + {TIMEOUT_GRACE_S:g} s grace (backstop)"
            self._finish(ex, RunResult.failed(msg, "timeout"), retryable=False)

    # --- finishing --------------------------------------------------------------------------------

    def _finish(self, ex: Execution, result: RunResult, *, retryable: bool = True) -> None:
        self._kill(ex)
        times = [n for n in ex.node_results.values()]
        started = min((_parse_time(n.get("started_at")) for n in times), default=None, key=_key)
        finished = max((_parse_time(n.get("finished_at")) for n in times), default=None, key=_key)
        result.provenance = {**ex.provenance, **result.provenance}
        if not result.environment:
            result.environment = dict(ex.spec.env)
        lead = ex.node_results.get(0, {}).get("progress")
        self._outcomes.append(
            Outcome(
                ex.run_id,
                result,
                started,
                finished or utcnow(),
                ex.attempt,
                retryable and result.failure_kind == "infrastructure",
                tuple(lead) if lead else None,
            )
        )
        self._forget(ex)

    def _forget(self, ex: Execution) -> None:
        for ref in ex.waiting:
            self._ref_owner.pop(ref, None)
        ex.waiting.clear()
        self.executions.pop(ex.run_id, None)

    def _kill(self, ex: Execution) -> None:
        """Stop whatever of the execution still runs. Force: the worker process is killed and its
        reaper kills the runner's processes (they live in their own sessions)."""
        import ray

        # Only tasks still pending: a finished task's worker may already run another run's task, and
        # a forced cancel must never reach it.
        pending = [r for r in ex.node_refs if r in ex.waiting]
        done = set(ray.wait(pending, num_returns=len(pending), timeout=0)[0]) if pending else set()
        for ref in [r for r in pending if r not in done]:
            try:
                ray.cancel(ref, force=True)
            except Exception as exc:  # finished already, or the worker is gone
                log.debug("cancel of run %s node task: %s", ex.run_id, exc)
        if ex.pg is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(ex.pg)
            except Exception as exc:
                log.debug("removing placement group of run %s: %s", ex.run_id, exc)
            ex.pg = None

    def _record(self, session: Session, outcomes: list[Outcome]) -> set[int]:
        """Record finished runs (or queue them again); returns the studies to refresh."""
        retry = [o for o in outcomes if o.retryable and o.attempt < self.settings.max_attempts]
        for out in retry:
            reason = f"attempt {out.attempt} failed ({out.result.error}); queued again"
            if claims.requeue(session, self.owner, out.run_id, reason=reason, next_attempt=True):
                log.warning("run %s: %s", out.run_id, reason)
        final = [o for o in outcomes if o not in retry]
        if not final:
            return set()
        # One guarded UPDATE locks every run to record (or finds it cancelled / taken over).
        held = claims.hold_for_finish(
            session, self.owner, [o.run_id for o in final], lease_s=self.settings.lease_s
        )
        items = []
        for out in final:
            run = held.get(out.run_id)
            if run is None:
                log.info("run %s was cancelled or taken over; its result is dropped", out.run_id)
                continue
            items.append(self._finished(out, run))
        try:  # one batch: one statement per table
            return record_run_results(session, items, refresh_studies=False)
        except InvalidResults as exc:  # raised before anything is written
            for i, problem in exc.by_index.items():
                res = items[i].result
                failed = replace(res, status="failed", metrics={}, series={}, better={})
                failed.error = f"the runner's result is invalid: {problem}"
                failed.failure_kind = "benchmark"
                items[i] = replace(items[i], result=failed)
            return record_run_results(session, items, refresh_studies=False)

    def _finished(self, out: Outcome, run: Run) -> FinishedRun:
        res = out.result
        if out.retryable and res.error:
            res = replace(res, error=f"{res.error} (after {out.attempt} attempt(s))")
        started_at = out.started_at
        if started_at and out.finished_at and out.finished_at < started_at:
            started_at = None
        if out.progress:
            run.current_step, run.total_steps = out.progress[0], out.progress[1]
        run.lease_expires_at = None
        return FinishedRun(run, res, started_at=started_at, finished_at=out.finished_at)


def _key(value: datetime | None) -> float:
    return value.timestamp() if value else 0.0


def multi_node_specs(
    spec: RunSpec, demand: NodeDemand, master_addr: str, master_port: int
) -> list[list[dict[str, Any]]]:
    """Per node, one spec per local rank: global RANK = node * ranks_per_node + LOCAL_RANK."""
    per = demand.ranks_per_node
    return [
        [
            replace(
                spec,
                rank=node * per + local,
                world_size=demand.world_size,
                local_rank=local,
                local_world_size=per,
                master_addr=master_addr,
                master_port=master_port,
            ).to_dict()
            for local in range(per)
        ]
        for node in range(demand.nodes)
    ]


def describe_ray_failure(exc: BaseException, node: int) -> str:
    """The reason a node task produced no result, in words a user can act on."""
    from ray import exceptions as rx

    where = f"node task {node}"
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    if isinstance(exc, rx.OutOfMemoryError):
        return f"{where}: the worker ran out of memory and was killed by Ray ({first})"
    if isinstance(exc, rx.WorkerCrashedError):
        return f"{where}: the Ray worker crashed or was killed ({first})"
    if isinstance(exc, rx.NodeDiedError):
        return f"{where}: the Ray node died ({first})"
    if isinstance(exc, rx.TaskCancelledError):
        return f"{where}: cancelled"
    if isinstance(exc, rx.RuntimeEnvSetupError):
        return f"{where}: could not set up the runtime environment (image): {first}"
    return f"{where}: {type(exc).__name__}: {first}"
