"""The dispatcher: claims queued runs, executes them on Ray, and records their results through ingest.

One loop, one thread, no SQL in Ray. Each iteration it

1. every tick (about once a second) renews the leases of its in-flight runs in one UPDATE, writes
   their latest progress, and stops any run the UPDATE no longer matched (cancelled, or its lease
   lost); every ``lease_s / 3`` it also re-queues runs of dead dispatchers whose lease expired;
2. waits briefly on Ray for finished node tasks;
3. claims as many queued runs as it has free slots (``max_concurrent_runs``), in ``queue_order``;
   after the commit it checks that the Ray cluster could ever place each claimed run (else it fails at
   once, naming what is missing), and submits it: one task per node, in a STRICT_SPREAD placement
   group for multi-node;
4. then, in a second transaction (Ray runs the new runs meanwhile), records the runs that finished as
   one batch through :func:`ablate.backend.services.ingest.record_run_results` (guarded by their leases).

Infrastructure failures (crashed or killed worker, OOM, failed preflight) go back to the queue with
``attempt + 1`` until ``max_attempts``; a benchmark that failed by itself, or timed out, is recorded.

The parts, each in its own module of this package: :mod:`.claims` and :mod:`.leases` (the SQL of
claims and leases), :mod:`.spec` (a run's rows -> its execution spec; pure), :mod:`.submit` (tasks and
placement groups on Ray), :mod:`.watch` (ready references, deadlines, stops, progress), :mod:`.record`
(finished runs -> ingest, or back to the queue). This module wires them and runs the loop.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.config import Settings
from ablate.backend.db.database import Database
from ablate.backend.db.models import Run
from ablate.backend.domain.placement import NodeInfo
from ablate.backend.domain.runner import Runner
from ablate.backend.services.studies import refresh_study_statuses
from ablate.backend.services.supervised import StoppableThread
from ablate.workers.dispatch import backoff, claims, devices, leases
from ablate.workers.dispatch.claimed import load_claimed
from ablate.workers.dispatch.execution import Execution
from ablate.workers.dispatch.record import Recorder
from ablate.workers.dispatch.spec import build_execution_spec
from ablate.workers.dispatch.submit import Submitter
from ablate.workers.dispatch.watch import Watcher

log = logging.getLogger(__name__)

TICK_S = 1.0  # progress and lease renewal at most once a second


def dispatcher_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


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
        self.cluster_names = cluster_names
        self.submitter = Submitter(runners, preflight=settings.preflight, owner=self.owner)
        self.watcher = Watcher(self.submitter, placement_timeout_s=settings.placement_timeout_s)
        self.recorder = Recorder(settings, self.owner)
        self.backoff = backoff.Backoff(settings)  # infrastructure failures wait here before a retry
        self.fence = devices.Fence(settings.device_release_grace_s)
        self._next_tick = 0.0
        self._next_reap = 0.0
        self._fence_due = False  # this dispatcher expired devices: fence on the next tick, not a reap later
        self._ray_address = ""
        self._runner = StoppableThread("ablate-dispatcher", self.run_forever)
        self._stop = self._runner.stop_event

    @property
    def executions(self) -> dict[int, Execution]:
        """The runs in flight, by id."""
        return self.watcher.executions

    # --- lifecycle --------------------------------------------------------------------------------

    def connect(self) -> None:
        if self.submitter.connected:
            return
        self._ray_address = self.submitter.connect(self.settings)
        log.info("dispatcher %s serving Ray at %s", self.owner, self._ray_address)

    @property
    def ray_address(self) -> str:
        return self._ray_address

    def alive_nodes(self) -> list[NodeInfo]:
        return self.submitter.alive_nodes()

    def run_forever(self, stop: threading.Event | None = None) -> None:
        """Claim and watch runs until ``stop`` is set, then give back what is in flight. An error ends
        it (``ablate dispatcher`` exits and is restarted); ``ablate serve`` runs it supervised instead
        (:mod:`ablate.workers.dispatch.supervisor`)."""
        stop = stop or self._stop
        self.connect()
        try:
            while not stop.is_set():
                if not self.step(wait_s=min(0.2, self.settings.dispatcher_poll_s)):
                    stop.wait(self.settings.dispatcher_poll_s)
        finally:
            self.shutdown()

    def start(self) -> None:
        """Run in a background thread, unsupervised (tests that drive a dispatcher beside them)."""
        self.connect()
        self._runner.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._runner.stop(timeout_s)

    def shutdown(self) -> None:
        """Record what finished already; stop every in-flight run and give it back to the queue (same
        attempt: not its fault); say that this dispatcher serves nothing any more."""
        with self.database.transaction() as session:
            leases.retire(session, self.owner)
        outcomes = self.watcher.take_finished() + self.backoff.take_all()
        if outcomes:
            with self.database.transaction() as session:
                refresh_study_statuses(session, self.recorder.record(session, outcomes))
        if not self.executions:
            return
        run_ids = self.watcher.kill_all()
        with self.database.transaction() as session:
            self._hand_back_devices(session)
            self.recorder.give_back(session, run_ids)
        self.watcher.clear()

    def drain(self, timeout_s: float = 600.0, *, until: Callable[[], bool] | None = None) -> None:
        """Run the loop until nothing is queued or in flight (tests, benchmarks, ``--exit-when-idle``)."""
        self.connect()
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            busy = self.step(wait_s=0.2)
            if until is not None and until():
                return
            if not busy and not self.executions and not self.backoff.held and not self._queued_left():
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
        if self.executions:
            self.watcher.wait(wait_s)
        elif (due := self.backoff.next_due()) is not None:  # only retries waiting: no busy loop
            time.sleep(min(wait_s, max(0.0, due - now)))
        self.watcher.check_deadlines()
        recorded, claimed = self._record_and_claim()
        return bool(recorded or claimed or self.executions or self.backoff.held)

    def _tick(self, now: float) -> None:
        self._next_tick = now + TICK_S
        # Ray gone (its raylet killed): stop here, before anything is claimed or failed as unplaceable;
        # the supervisor gives the runs back and restarts (or re-joins) Ray.
        self.submitter.check_ray()
        progress = self.watcher.take_progress()
        held: set[int] = set()
        with self.database.transaction() as session:
            # Renew before reaping: a loop that stalled past lease_s must not re-queue its own runs.
            if self.executions or self.backoff.held:  # the runs waiting to retry stay ours too
                held = leases.renew_leases(
                    session,
                    self.owner,
                    [*self.executions, *self.backoff.held],
                    lease_s=self.settings.lease_s,
                )
                devices.renew(
                    session,
                    self.owner,
                    [(r, ex.attempt) for r in held if (ex := self.executions.get(r)) and ex.devices],
                    lease_s=self.settings.lease_s,
                )
                for run_id, (step, total, tput) in progress.items():
                    if run_id in held:
                        leases.write_progress(session, self.owner, run_id, step, total, tput)
            fence = self._fence_due or self.fence.busy
            if now >= self._next_reap:
                self._next_reap = now + max(0.5, self.settings.lease_s / 3)
                self._announce(session)
                reaped = leases.reap_expired(session, max_attempts=self.settings.max_attempts)
                refresh_study_statuses(session, reaped.study_ids)
                if reaped.requeued or reaped.failed:
                    log.warning("expired leases: requeued %s, failed %s", reaped.requeued, reaped.failed)
                fence = True
            if fence:  # every tick while this dispatcher stopped something or waits on a probe
                self._fence_due = False
                # devices of stopped or lost attempts: free once their processes are confirmed gone
                nodes = {n.node_id: n.alive for n in self.submitter.all_nodes()}
                for node_id, run_id, attempt, _ in self.fence.step(session, nodes):
                    log.info("run %s attempt %s: devices on node %s confirmed free", run_id, attempt, node_id)
        self.backoff.drop({r for r in self.backoff.held if r not in held})
        for run_id in [r for r in self.executions if r not in held]:
            log.info("run %s is no longer ours (cancelled or lease lost): stopping it", run_id)
            self.watcher.stop(run_id)

    def served(self) -> list[int]:
        """The ids of the clusters this dispatcher serves."""
        with self.database.read() as session:
            return claims.served_clusters(
                session, self._ray_address, joined=self.settings.ray_address, cluster_names=self.cluster_names
            )

    def _announce(self, session: Session) -> None:
        served = claims.served_clusters(
            session, self._ray_address, joined=self.settings.ray_address, cluster_names=self.cluster_names
        )
        leases.announce(
            session, self.owner, gcs_address=self._ray_address, served=served, lease_s=self.settings.lease_s
        )

    def _record_and_claim(self) -> tuple[int, int]:
        """Claim as many queued runs as there are free slots and submit them to Ray once that committed;
        then, in a second transaction, record the finished runs. Claiming first keeps Ray busy with the
        new runs while the results are written. Returns (recorded, claimed)."""
        now = time.monotonic()
        finished, waiting = self.backoff.hold(self.watcher.take_finished(), now)
        due = self.backoff.due(now)
        outcomes = finished + due
        released = self.watcher.take_released()
        free = self.settings.max_concurrent_runs - len(self.executions)
        if not outcomes and not waiting and not released and free <= 0:
            return 0, 0
        try:
            claimed = self._claim_and_submit(released, free)
            if outcomes or waiting:
                with self.database.transaction() as session:
                    backoff.note_waiting(session, self.owner, waiting)
                    studies = self.recorder.record(session, outcomes) if outcomes else set()
                    # a study is finished with its last recorded run
                    refresh_study_statuses(session, studies)
        except BaseException:
            self.watcher.put_back(finished)  # not recorded: try again next iteration
            self.backoff.put_back(due, now)
            raise
        return len(outcomes), claimed

    def _claim_and_submit(self, released: list[tuple[int, int, str, bool]], free: int) -> int:
        """Hand back the devices of node tasks that ended, claim up to ``free`` runs, and submit those
        once the claim committed; returns how many were claimed."""
        if not released and free <= 0:
            return 0
        try:
            with self.database.transaction() as session:
                self._hand_back_devices(session, released)  # first: the claim below may reuse them
                claimed, claimed_studies = self._claim(session, free) if free > 0 else ([], set())
                refresh_study_statuses(session, claimed_studies)  # "running" from its first claimed run
        except BaseException:
            self.watcher.released = released + self.watcher.released
            raise
        for ex in claimed:
            self.watcher.add(ex)
        return len(claimed)

    def _claim(self, session: Session, free: int) -> tuple[list[Execution], set[int]]:
        got = claims.claim_runs(
            session,
            self.owner,
            limit=free,
            lease_s=self.settings.lease_s,
            serving=claims.Serving(self._ray_address, self.settings.ray_address, self.cluster_names),
            device_claiming=claims.DeviceClaiming(self.submitter.all_nodes(), self.settings.wait_deadline_s),
        )
        rows, studies = load_claimed(session, got)
        now = time.monotonic()
        by_id = {c.run_id: c for c in got}
        started = [
            Execution.start(
                build_execution_spec(r, self.settings, self.owner),
                now,
                excluded=r.excluded_nodes,
                placement_timeout_s=self.settings.placement_timeout_s,
                devices=by_id[r.run_id].devices,
                fail_now=by_id[r.run_id].fail,
            )
            for r in rows
        ]
        return started, studies

    def _hand_back_devices(
        self, session: Session, released: list[tuple[int, int, str, bool]] | None = None
    ) -> None:
        """Free the devices of node tasks that returned; those of killed or lost ones wait for the fence."""
        if released is None:
            released = self.watcher.take_released()
        for run_id, attempt, node_id, returned in released:
            if returned:
                devices.release(session, run_id, attempt, node_id)
            else:
                devices.expire(session, [(run_id, attempt)], node_id)
                self._fence_due = True
