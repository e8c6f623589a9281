"""Connecting to Ray: a local instance sized to this machine by default, or an existing cluster.

``ABLATE_RAY_ADDRESS`` empty: start a local Ray (``ABLATE_RAY_NUM_CPUS`` CPUs, default all cores; GPUs
as Ray detects them). Set: join that cluster (``host:port`` of the head's GCS, or ``auto``), with the
token of ``ABLATE_RAY_AUTH_TOKEN[_FILE]`` where the head has token authentication (see ray_auth).
Either way the process is one Ray *driver*; one dispatcher serves one Ray cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ablate.backend.config import Settings
from ablate.backend.domain.placement import NodeInfo
from ablate.backend.errors import AblateError
from ablate.workers.dispatch import ray_auth

log = logging.getLogger(__name__)
NAMESPACE = "ablate"


def ensure_ray(settings: Settings) -> str:
    """Connect (or start) Ray once per process; returns the GCS address connected to."""
    import ray

    if not ray.is_initialized():
        common: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": False}
        token_from = ray_auth.apply(settings)  # a cluster with token authentication (Ray 2.60)
        if settings.ray_address:
            log.info("joining Ray cluster at %s", settings.ray_address)
            ray_auth.check_access(settings.ray_address, token_from)
            try:
                ray.init(address=settings.ray_address, **common)
            except ConnectionError as exc:
                raise ray_auth.join_failed(settings.ray_address, exc, token_from) from None
        else:
            log.info("starting a local Ray instance (num_cpus=%s)", settings.ray_num_cpus or "all")
            if token_from is None:
                ray_auth.own_local_token()
            # "local": a Ray of our own even when another process on this machine runs one (without
            # it, ray.init joins the newest local Ray it finds, and our runs land on someone else's).
            ray.init(address="local", num_cpus=settings.ray_num_cpus, include_dashboard=False, **common)
    return str(ray.get_runtime_context().gcs_address)


class RayLost(AblateError):
    """The dispatcher's Ray is gone (its node dead, or its GCS unreachable): nothing can be placed until
    it is back, so no run may be failed as unplaceable meanwhile. The supervisor restarts (or re-joins) it."""


def lost_reason(nodes: Callable[[], list[NodeInfo]] | None = None) -> str | None:
    """Why this process's Ray cannot run anything any more, or None while it can.

    A local Ray started by this process is lost as soon as one of its processes (raylet, GCS) died: Ray's
    GCS marks the node dead only after its health checks missed for about 15 s, and meanwhile every
    task submitted fails with ``LocalRayletDiedError``. Any Ray (local or joined) is lost when the node
    this driver is attached to is no longer alive, or its GCS does not answer. ``nodes``: how to read
    Ray's nodes (the dispatcher's cached reading), else :func:`all_nodes`."""
    import ray

    if not ray.is_initialized():
        return "Ray is not connected"
    node = getattr(ray._private.worker, "_global_node", None)  # set in the process that started Ray
    if node is not None and node.head:
        # only the two Ray cannot run without: a helper (log monitor, agents) may end on its own
        dead = sorted({kind for kind, _ in node.dead_processes() if kind in ("raylet", "gcs_server")})
        if dead:
            return f"the local Ray's {', '.join(dead)} died"
    try:
        here = ray.get_runtime_context().get_node_id()
        known = (nodes or all_nodes)()
    except Exception as exc:
        return f"Ray's GCS does not answer: {type(exc).__name__}: {exc}"[:300]
    if not any(n.node_id == here and n.alive for n in known):
        return f"this dispatcher's Ray node {here[:12]} is dead (its raylet died or lost the GCS)"
    return None


def disconnect() -> None:
    """Leave Ray (a local Ray of this process is shut down with its remaining processes), so that the
    next :func:`ensure_ray` starts or joins it afresh. Never raises: the Ray may be half gone."""
    import ray

    try:
        ray.shutdown()
    except Exception as exc:
        log.warning("leaving the lost Ray: %s", exc)


def alive_nodes() -> list[NodeInfo]:
    return [n for n in all_nodes() if n.alive]


def all_nodes() -> list[NodeInfo]:
    """Every node Ray knows, the dead ones too (a pool node briefly gone is worth waiting for)."""
    import ray

    return [NodeInfo.from_ray(n) for n in ray.nodes()]


def remote_node_task() -> Any:
    """The node task as a Ray remote function. ``max_retries=0``: a crashed worker is reported to the
    dispatcher, which decides about retrying (and counts the attempt), instead of Ray retrying it
    silently."""
    import ray

    from ablate.workers.dispatch.task import run_node

    return ray.remote(max_retries=0)(run_node)


def remote_rendezvous() -> Any:
    import ray

    from ablate.workers.dispatch.task import rendezvous

    return ray.remote(num_cpus=0, max_retries=0)(rendezvous)


def _actor_on_this_node(cls: type, name: str | None = None) -> Any:
    """An actor of ``cls`` with no CPU, restarted if it dies, on the dispatcher's own node: one on a
    worker node would be lost with that node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    return ray.remote(num_cpus=0, max_restarts=-1)(cls).options(scheduling_strategy=here, name=name).remote()


def start_board() -> tuple[Any, str]:
    """The dispatcher's progress board and its actor name (unique per dispatcher, in our namespace):
    node tasks get the name and look the board up when their runner first reports progress."""
    import uuid

    from ablate.workers.dispatch.board import ProgressBoard

    name = f"ablate-progress-{uuid.uuid4().hex[:12]}"
    return _actor_on_this_node(ProgressBoard, name), name
