"""Submitting executions to Ray: node tasks, placement groups, the rendezvous, and stopping them.

A single-node CPU run is one node task; until it says it started (through the progress board) its
placement deadline runs. A run on devices, or of several nodes, first gets a placement group (one bundle
per node, ``STRICT_SPREAD``, the pool's label selector on every bundle and, for a run on devices, the
node whose devices the claim took); once it is placed a run of one node starts on it, and a multi-node
run's tiny task on bundle 0 picks MASTER_ADDR/MASTER_PORT, and then one node task per bundle runs that
node's ranks. The submitter only starts these steps, adds their references to the execution's
``waiting`` and returns them; the watcher waits on them and decides when the next step is due.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from ablate.backend.config import Settings
from ablate.backend.domain.placement import NodeInfo, unplaceable_reason
from ablate.backend.domain.runner import Runner
from ablate.workers.dispatch import devices, ray_runtime
from ablate.workers.dispatch.execution import Execution
from ablate.workers.dispatch.spec import single_node_specs

log = logging.getLogger(__name__)

NODES_CACHE_S = 2.0


class Submitter:
    """The dispatcher's Ray handles (node task, rendezvous task, progress board, runner factories)."""

    def __init__(
        self,
        runners: Mapping[str, Callable[[], Runner]] | None = None,
        *,
        preflight: str = "lenient",
        owner: str = "",
    ) -> None:
        self.runners = dict(runners or {})
        self.preflight = preflight  # ABLATE_PREFLIGHT, handed to every node task
        self.owner = owner  # the dispatcher's id: names its claims of devices on the nodes
        self.board: Any = None
        self.board_name = ""  # node tasks look the board up by name (a handle per task costs more)
        self._node_task: Any = None
        self._rendezvous: Any = None
        self._factory_refs: dict[str, Any] = {}
        self._nodes: tuple[float, list[NodeInfo]] = (0.0, [])

    @property
    def connected(self) -> bool:
        return self._node_task is not None

    def connect(self, settings: Settings) -> str:
        """Join (or start) Ray and create the remote functions and the board; returns Ray's address."""
        address = ray_runtime.ensure_ray(settings)
        self._node_task = ray_runtime.remote_node_task()
        self._rendezvous = ray_runtime.remote_rendezvous()
        self.board, self.board_name = ray_runtime.start_board()
        return address

    def alive_nodes(self) -> list[NodeInfo]:
        return [n for n in self.all_nodes() if n.alive]

    def check_ray(self) -> None:
        """Raise :class:`~.ray_runtime.RayLost` when this dispatcher's Ray is gone."""
        lost = ray_runtime.lost_reason(self.all_nodes)  # the nodes as read at most every 2 s
        if lost:
            self._nodes = (0.0, [])
            raise ray_runtime.RayLost(lost)

    def all_nodes(self) -> list[NodeInfo]:
        """Every node Ray knows (alive or dead), read at most every NODES_CACHE_S."""
        at, nodes = self._nodes
        if time.monotonic() - at > NODES_CACHE_S:
            nodes = ray_runtime.all_nodes()
            self._nodes = (time.monotonic(), nodes)
        return nodes

    def unplaceable(self, ex: Execution) -> str | None:
        """Why the Ray cluster could never hold this run (None: it can, maybe later), leaving out the
        nodes its earlier attempts excluded. Raises :class:`~.ray_runtime.RayLost` instead when the
        reason is that this dispatcher's Ray itself is gone: the run waits for it, not fails."""
        nodes = [n for n in self.alive_nodes() if n.node_id not in ex.excluded]
        reason = unplaceable_reason(ex.demand, nodes)
        if reason:
            lost = ray_runtime.lost_reason()
            if lost:
                raise ray_runtime.RayLost(lost)
        if reason and ex.excluded:
            reason += f" (leaving out node(s) excluded by earlier attempts: {_excluded_text(ex.excluded)})"
        return reason

    def why_not_placed(self, ex: Execution) -> str:
        """Why a placement group waits: a resource or label no alive node has (once nodes went away),
        or resources that exist but are held by other work."""
        self._nodes = (0.0, [])  # fresh: a node may have gone since the run was claimed
        reason = self.unplaceable(ex)
        if reason:
            return reason
        return (
            f"{ex.demand.describe()}; enough alive nodes have these resources, but not free at the same "
            "time (held by other work)"
        )

    def start(self, ex: Execution) -> list[Any]:
        """Submit the first step of ``ex``; returns the new references to wait on."""
        if ex.demand.nodes == 1 and not ex.devices:
            refs = self.launch_nodes(ex, single_node_specs(ex.spec))
            ex.phase = "starting"  # until the node task says it started (the placement deadline runs)
            return refs
        from ray.util.placement_group import placement_group

        ex.pg = placement_group(
            ex.demand.bundles(),
            strategy="STRICT_SPREAD",
            name=devices.placement_group_name(ex.run_id, ex.attempt, self.owner),
            bundle_label_selector=_bundle_selectors(ex),
        )
        ex.phase = "placing"
        return [ex.wait_on(ex.pg.ready())]

    def placed(self, ex: Execution) -> list[Any]:
        """The placement group is ready: a run of one node starts there; several first meet on node 0."""
        if ex.demand.nodes == 1:
            return self.launch_nodes(ex, single_node_specs(ex.spec))
        return [self.rendezvous(ex)]

    def rendezvous(self, ex: Execution) -> Any:
        """The placement group is ready: ask node 0 for MASTER_ADDR/MASTER_PORT."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ex.phase = "rendezvous"
        strategy = PlacementGroupSchedulingStrategy(ex.pg, placement_group_bundle_index=0)
        return ex.wait_on(self._rendezvous.options(scheduling_strategy=strategy).remote())

    def launch_nodes(self, ex: Execution, per_node: list[list[dict[str, Any]]]) -> list[Any]:
        """One node task per entry of ``per_node`` (that node's rank specs); returns their references."""
        ex.phase = "running"
        factory = self._factory_ref(ex.spec.runner_name)
        checks = {**ex.plan.checks, "preflight": self.preflight}
        if ex.devices:
            checks["holder"] = devices.holder_id(ex.run_id, ex.attempt, self.owner)
        refs = []
        for index, specs in enumerate(per_node):
            ref = self._node_task.options(**self._node_options(ex, index)).remote(
                specs, checks, self.board_name or None, factory, ex.device_ids(index)
            )
            ex.node_refs.append(ref)
            refs.append(ex.wait_on(ref))
        return refs

    def _node_options(self, ex: Execution, index: int) -> dict[str, Any]:
        opts: dict[str, Any] = {"name": f"ablate-run-{ex.run_id}-node{index}"}
        if ex.pg is None:
            opts.update(ex.demand.task_options())
            if ex.devices:  # on the node whose devices the claim took
                opts["label_selector"] = {**opts.get("label_selector", {}), NODE_ID_LABEL: ex.devices[0][0]}
            elif ex.excluded:
                opts["label_selector"] = {**opts.get("label_selector", {}), **_avoid(ex)}
        else:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            res = ex.demand.task_options()
            res.pop("label_selector", None)  # the bundle already carries it
            opts.update(res)
            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                ex.pg, placement_group_bundle_index=index
            )
        if ex.plan.runtime_env:
            opts["runtime_env"] = ex.plan.runtime_env
        return opts

    def _factory_ref(self, name: str) -> Any:
        """A runner factory given to this dispatcher, put in Ray's object store once (not pickled
        into every task); None lets the worker look the runner up in its own registry. (Pickled bytes
        inline with each task were cheaper, but then a worker whose node was just killed could still
        return its result, and the lost node went unnoticed: tests/workers/test_node_loss.py.)"""
        if name not in self.runners:
            return None
        if name not in self._factory_refs:
            import ray

            self._factory_refs[name] = ray.put(self.runners[name])
        return self._factory_refs[name]

    def kill(self, ex: Execution) -> None:
        """Stop whatever of the execution still runs. Force: the worker process is killed and its
        reaper kills the runner's processes (they live in their own sessions)."""
        import ray

        # Only tasks still pending: a finished task's worker may already run another run's task, and
        # a forced cancel must never reach it.
        pending = [r for r in ex.node_refs if r in ex.waiting]
        try:
            done = set(ray.wait(pending, num_returns=len(pending), timeout=0)[0]) if pending else set()
        except Exception as exc:  # Ray lost: nothing of it is left to stop
            log.debug("run %s: cannot ask Ray about its node tasks: %s", ex.run_id, exc)
            return
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


# Ray gives every node this label; a selector ``!in(a,b)`` keeps a task or bundle off those nodes.
NODE_ID_LABEL = "ray.io/node-id"


def _avoid(ex: Execution) -> dict[str, str]:
    return {NODE_ID_LABEL: f"!in({','.join(sorted(ex.excluded))})"}


def _bundle_selectors(ex: Execution) -> list[dict[str, str]] | None:
    """Every bundle's label selector: the pool's labels and the node whose devices the claim took for
    it; without devices (CPU), after a lost or failed node, not that node."""
    if ex.devices:
        return [{**ex.demand.labels, NODE_ID_LABEL: node} for node, _ in ex.devices]
    if not ex.excluded:
        return ex.demand.bundle_label_selector()
    return [{**ex.demand.labels, **_avoid(ex)} for _ in range(ex.demand.nodes)]


def _excluded_text(excluded: Mapping[str, str]) -> str:
    return "; ".join(f"{node}: {why}" for node, why in sorted(excluded.items()))
