"""Watching executions in flight: Ray references becoming ready, deadlines, runs to stop, progress.

The watcher holds every in-flight :class:`~ablate.workers.dispatch.execution.Execution` of this
dispatcher and the Ray references each waits on. When a reference is ready it moves the execution on:
a multi-node run's placement group placed -> the rendezvous on node 0 -> one node task per node; a node
task done -> the run finished (on its first failing node, or when every node returned). A finished,
timed-out or unplaceable execution becomes an :class:`~ablate.workers.dispatch.execution.Outcome` in
``finished``, which the dispatcher hands to the recorder. Nothing here touches the database.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from ablate.backend.domain.runner import RunResult
from ablate.workers.dispatch import logs
from ablate.workers.dispatch.execution import START_ALLOWANCE_S, TIMEOUT_GRACE_S, Execution, Outcome
from ablate.workers.dispatch.spec import multi_node_specs
from ablate.workers.dispatch.submit import Submitter

log = logging.getLogger(__name__)

Progress = tuple[int, int, float | None]  # (step, total, throughput)


class Watcher:
    """This dispatcher's runs in flight, the references they wait on, and the outcomes not yet recorded."""

    def __init__(self, submitter: Submitter, *, placement_timeout_s: float = 0.0) -> None:
        self.submitter = submitter
        self.placement_timeout_s = placement_timeout_s  # only for the message; deadlines are per run
        self.executions: dict[int, Execution] = {}
        self.finished: list[Outcome] = []  # not recorded yet
        # devices to hand back: (run id, attempt, node id, whether its node task returned); a node task
        # that returned took its processes with it, any other end waits for the fence (devices.py)
        self.released: list[tuple[int, int, str, bool]] = []
        self._ref_owner: dict[Any, int] = {}
        self._progress_ref: Any = None

    # --- starting and stopping ------------------------------------------------------------------

    def add(self, ex: Execution) -> None:
        """Watch a claimed execution from now on: submit it to Ray, or fail it at once (not retried:
        more attempts cannot create a missing resource) when the Ray cluster could never place it."""
        self.executions[ex.run_id] = ex
        if ex.fail_now:
            self.finish(ex, RunResult.failed(ex.fail_now, "infrastructure"), retryable=False)
            return
        if ex.plan.refusal:
            self.finish(ex, RunResult.failed(ex.plan.refusal, "benchmark"), retryable=False)
            return
        reason = self.submitter.unplaceable(ex)
        if reason:
            self.finish(ex, RunResult.failed(f"unplaceable: {reason}", "infrastructure"), retryable=False)
            return
        self._await(ex, self.submitter.start(ex))

    def stop(self, run_id: int) -> None:
        """Stop a run that is no longer ours (cancelled, or its lease lost): it records nothing."""
        ex = self.executions[run_id]
        self.submitter.kill(ex)
        self._release_rest(ex)
        self._forget(ex)

    def kill_all(self) -> list[int]:
        """Stop every execution still on Ray (the dispatcher stops); returns their run ids. They stay
        watched until :meth:`clear` (after the dispatcher gave them back to the queue)."""
        for ex in list(self.executions.values()):
            self.submitter.kill(ex)
            self._release_rest(ex)
        return list(self.executions)

    def clear(self) -> None:
        self.executions.clear()
        self._ref_owner.clear()

    def take_released(self) -> list[tuple[int, int, str, bool]]:
        out, self.released = self.released, []
        return out

    def take_finished(self) -> list[Outcome]:
        out, self.finished = self.finished, []
        return out

    def put_back(self, outcomes: list[Outcome]) -> None:
        """Outcomes whose recording failed: recorded with the next batch."""
        self.finished = outcomes + self.finished

    # --- waiting on Ray ---------------------------------------------------------------------------

    def wait(self, wait_s: float) -> None:
        """Wait up to ``wait_s`` for one reference to be ready, then handle every ready one."""
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
            self._await(ex, self.submitter.placed(ex))
            return
        if ex.phase == "rendezvous":
            try:
                addr, port = ray.get(ref)
            except Exception as exc:
                self.finish(ex, RunResult.failed(f"rendezvous on node 0 failed: {exc}", "infrastructure"))
                return
            specs = multi_node_specs(ex.spec, ex.demand, addr, int(port))
            self._await(ex, self.submitter.launch_nodes(ex, specs))
            return
        index = ex.node_refs.index(ref)
        try:
            node = ray.get(ref)
        except Exception as exc:
            # Before anything is resubmitted: a dead node is named and kept out of the next attempts
            # (Ray reports the task's failure at once but marks the node dead only after its health
            # checks, some seconds later; a retry must not be placed on it meanwhile).
            dead = dead_node(exc)
            reason = describe_ray_failure(exc, index)
            if dead is not None:
                ex.exclude(*dead)
                reason = f"node task {index}: {dead[1]}"
            self.finish(ex, RunResult.failed(reason, "infrastructure"))
            return
        logs.keep(node.pop("logs", None), ex.spec, str(node.get("host", "?")))
        ex.node_results[index] = node
        if index < len(ex.devices):  # the task returned: its processes are gone, its devices free
            node_id = ex.devices[index][0]
            ex.released.add(node_id)
            self.released.append((ex.run_id, ex.attempt, node_id, True))
        res = RunResult.from_dict(node["result"])
        if node.get("preflight_failed") and node.get("node_id"):
            ex.exclude(str(node["node_id"]), f"failed preflight: {res.error}")
        if not res.succeeded:
            self.finish(ex, res)
        elif len(ex.node_results) == len(ex.node_refs):  # node 0's result is the run's
            self.finish(ex, res if index == 0 else RunResult.from_dict(ex.node_results[0]["result"]))

    def check_deadlines(self) -> None:
        now = time.monotonic()
        waiting = [e for e in self.executions.values() if e.phase in ("placing", "starting")]
        for ex in [e for e in waiting if e.placement_deadline]:
            starting = ex.phase == "starting"
            allowance = START_ALLOWANCE_S if starting else 0.0
            if ex.placement_deadline is not None and now > ex.placement_deadline + allowance:
                # Not retried: the queue behind it must move; the reason says what to fix or add.
                if starting:
                    msg = (
                        f"not started within {self.placement_timeout_s:g} s (ABLATE_PLACEMENT_TIMEOUT_S) "
                        f"+ {START_ALLOWANCE_S:g} s for its worker to start: "
                    )
                else:
                    msg = f"not placed within {self.placement_timeout_s:g} s (ABLATE_PLACEMENT_TIMEOUT_S): "
                msg += self.submitter.why_not_placed(ex)
                self.finish(ex, RunResult.failed(msg, "infrastructure"), retryable=False)
        for ex in [e for e in self.executions.values() if now > e.deadline]:
            msg = f"no result within {ex.spec.timeout_s:g} s + {TIMEOUT_GRACE_S:g} s grace (backstop)"
            self.finish(ex, RunResult.failed(msg, "timeout"), retryable=False)

    def take_progress(self) -> dict[int, Progress]:
        """The board's latest reports, without ever blocking the loop (leases must not wait on it)."""
        import ray

        out: dict[int, Progress] = {}
        pending = self._progress_ref
        if pending is not None:
            ready, _ = ray.wait([pending], timeout=0)
            if not ready:
                return out
            try:
                out, started = ray.get(pending)
            except Exception as exc:  # progress is best effort; leases are not
                log.warning("progress board unavailable: %s", exc)
                # a restarted board forgot who started: stop timing what it can no longer tell
                for ex in self.executions.values():
                    if ex.phase == "starting":
                        ex.placement_deadline = None
            else:
                for run_id, attempt in started:
                    going = self.executions.get(run_id)
                    if going is not None and going.attempt == attempt and going.phase == "starting":
                        going.phase = "running"
        board = self.submitter.board
        self._progress_ref = board.take.remote() if self.executions and board else None
        return out

    # --- finishing --------------------------------------------------------------------------------

    def finish(self, ex: Execution, result: RunResult, *, retryable: bool = True) -> None:
        self.submitter.kill(ex)
        self._release_rest(ex)
        self.finished.append(ex.outcome(result, retryable=retryable))
        self._forget(ex)

    def _release_rest(self, ex: Execution) -> None:
        """The devices of the nodes whose task did not return: they wait for the fence (unless no node
        task was ever submitted: then nothing can hold them)."""
        for node_id, _ in ex.devices:
            if node_id not in ex.released:
                ex.released.add(node_id)
                self.released.append((ex.run_id, ex.attempt, node_id, not ex.node_refs))

    def _await(self, ex: Execution, refs: list[Any]) -> None:
        for ref in refs:
            self._ref_owner[ref] = ex.run_id

    def _forget(self, ex: Execution) -> None:
        for ref in ex.waiting:
            self._ref_owner.pop(ref, None)
        ex.waiting.clear()
        self.executions.pop(ex.run_id, None)


_NODE_ID = re.compile(r"node ID: ([0-9a-f]{16,})", re.I)


def dead_node(exc: BaseException) -> tuple[str, str] | None:
    """``(node id, reason)`` when a node task failed because its Ray node died, else None. The node id
    comes from Ray's error; the reason adds Ray's death message once Ray has marked the node dead."""
    import ray
    from ray import exceptions as rx

    if not isinstance(exc, rx.NodeDiedError):
        return None
    found = _NODE_ID.search(str(exc))
    if found is None:
        return None
    node_id = found.group(1)
    state: dict[str, Any] = next((n for n in ray.nodes() if n.get("NodeID") == node_id), {})
    where = state.get("NodeManagerAddress") or "unknown address"
    why = "" if state.get("Alive", True) else f": {state.get('DeathReasonMessage') or 'marked dead'}"
    return node_id, f"the Ray node {node_id} ({where}) died{why}"


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
