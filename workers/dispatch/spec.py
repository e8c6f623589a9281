"""A run's execution spec, built from its rows: pure functions, no Ray and no database.

:func:`build_execution_spec` turns a claimed run's workload, variant, cluster and release (their
columns as plain dicts, see :class:`RunRows`) and the settings into everything the run executes with:
the :class:`~ablate.backend.domain.runner.RunSpec` the runner gets, the Ray demand of each node, the
preflight checks, the container the run executes in (the variant's image, else its release's own image,
on a cluster with a container runtime; see :mod:`ablate.workers.containers`), and the provenance
recorded with the result. :func:`multi_node_specs` spreads a multi-node run's spec over its ranks
once node 0's address is known.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ablate.backend.config import Settings
from ablate.backend.domain.placement import NodeDemand, demand_for
from ablate.backend.domain.runner import DEFAULT_RUNNER, LAUNCH_MODES, RunSpec
from ablate.workers.containers import RAY_IMAGE_URI, ContainerConfig, image_reference
from ablate.workers.envrules import plan_environment


@dataclass(frozen=True)
class RunRows:
    """A claimed run and the rows it names, as plain column values (``id`` and ``created_at`` left out)."""

    run_id: int
    attempt: int
    release_ref: str  # "image:tag"
    workload: dict[str, Any]
    variant: dict[str, Any]
    cluster: dict[str, Any]
    release: dict[str, Any]
    excluded_nodes: dict[str, str] = field(default_factory=dict)  # Ray node id -> why it is avoided


@dataclass(frozen=True)
class ExecutionSpec:
    """What one attempt of a run executes with, decided before anything is submitted to Ray."""

    run_id: int
    attempt: int
    spec: RunSpec  # single node: ``local_world_size`` ranks; multi-node: see multi_node_specs
    demand: NodeDemand  # one node's share; ``demand.nodes`` of them
    checks: dict[str, Any]  # the preflight's arguments on each node
    runtime_env: dict[str, Any] | None  # Ray's runtime_env (only with the opt-in ray-image-uri runtime)
    provenance: dict[str, str]  # recorded with the result, under the runner's own
    refusal: str | None = None  # why this run cannot execute at all (failed at once, not retried)

    @property
    def timeout_s(self) -> float:
        return self.spec.timeout_s


def build_execution_spec(rows: RunRows, settings: Settings, dispatcher: str) -> ExecutionSpec:
    """The execution spec of one claimed run. ``dispatcher`` is the claiming dispatcher's id (provenance)."""
    workload, variant, cluster, release = rows.workload, rows.variant, rows.cluster, rows.release
    env = plan_environment(variant, release, cluster)
    demand = demand_for(cluster)
    opts = {**(workload.get("runner_options") or {}), **(variant.get("runner_options") or {})}
    timeout_s = float(opts.get("timeout_s") or settings.run_timeout_s)
    launch = launch_mode(str(workload.get("runner") or DEFAULT_RUNNER), opts)
    placed = container_placement(rows, env.env)
    spec = RunSpec(
        run_id=rows.run_id,
        workload=dict(workload),
        variant=dict(variant),
        cluster=dict(cluster),
        env=env.env,
        log_dir=str(settings.log_dir),
        timeout_s=timeout_s,
        local_world_size=demand.ranks_per_node if demand.nodes == 1 else 1,
        nnodes=demand.nodes,
        launch=launch,
        attempt=rows.attempt,
        container=placed.container,
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
    checks["attempt"] = rows.attempt  # names the devices this attempt holds on a node (see devices.py)
    provenance = {
        "dispatcher": dispatcher,
        "attempt": str(rows.attempt),
        "release": rows.release_ref,
        "ray_demand": demand.describe(),
        "launch": launch,
        "execution": placed.execution,
        **env.provenance(),
    }
    if placed.image:
        provenance["image"] = placed.image
    return ExecutionSpec(
        run_id=rows.run_id,
        attempt=rows.attempt,
        spec=spec,
        demand=demand,
        checks=checks,
        runtime_env=placed.runtime_env,
        provenance=provenance,
        refusal=placed.refusal,
    )


@dataclass(frozen=True)
class Placement:
    """How a run executes: on the host, in a container of the cluster's runtime, or (opt-in) in Ray's
    ``image_uri`` runtime environment."""

    execution: str  # "host", "container (podman)", "container (docker)", "ray-image-uri"
    image: str | None = None
    container: dict[str, Any] | None = None  # RunSpec.container
    runtime_env: dict[str, Any] | None = None
    refusal: str | None = None


def container_placement(rows: RunRows, env: dict[str, str]) -> Placement:
    """Which image a run executes in and how: the variant's ``image`` wins, else the release's own
    (``[<image_registry>/]<image>:<tag>``), on a cluster whose ``container`` names a runtime. A cluster
    without one runs processes on the host; a variant image there is refused (it would not be used)."""
    variant, cluster, release = rows.variant, rows.cluster, rows.release
    own = variant.get("image")
    if not cluster.get("container"):
        if own:
            return Placement(
                "host",
                refusal=f"variant {variant.get('name')!r} names image {own!r}, but cluster "
                f"{cluster.get('name')!r} has no container runtime (define container: {{runtime: podman}} "
                "on the cluster)",
            )
        return Placement("host")
    try:
        cfg = ContainerConfig.parse(cluster["container"])
    except ValueError as exc:
        return Placement("host", refusal=f"cluster {cluster.get('name')!r}: {exc}")
    ref = (
        str(own) if own else image_reference(release["image"], release["tag"], release.get("image_registry"))
    )
    if cfg.runtime == RAY_IMAGE_URI:
        return Placement(RAY_IMAGE_URI, ref, runtime_env={"image_uri": ref, "env_vars": dict(env)})
    return Placement(
        f"container ({cfg.runtime})", ref, container={**cfg.to_dict(), "image": ref, "attempt": rows.attempt}
    )


def launch_mode(runner: str, opts: dict[str, Any]) -> str:
    """``per-node`` or ``per-device`` (validated at the edge; a bad stored value fails loudly here)."""
    if runner != "command":
        return "per-device"  # torch-llm is itself a per-device launcher (see docs/runners.md)
    launch = str(opts.get("launch") or LAUNCH_MODES[0])
    if launch not in LAUNCH_MODES:
        raise ValueError(f"runner_options.launch must be one of {', '.join(LAUNCH_MODES)}, not {launch!r}")
    return launch


def single_node_specs(spec: RunSpec) -> list[list[dict[str, Any]]]:
    """The specs of a run of one node. The ``command`` runner gets them spread like a multi-node run's
    (port 0: the node task picks a free one); other runners get one spec and start the node's
    ``local_world_size`` ranks themselves."""
    if spec.runner_name == "command":
        per = max(1, spec.local_world_size)
        return _spread(spec, 1, per, "127.0.0.1", 0)
    # Shallow: Ray serialises the task's arguments anyway (``asdict`` would deep-copy first).
    return [[dict(vars(spec))]]


def multi_node_specs(
    spec: RunSpec, demand: NodeDemand, master_addr: str, master_port: int
) -> list[list[dict[str, Any]]]:
    """Per node, the specs its node task runs (see :func:`_spread`)."""
    return _spread(spec, demand.nodes, demand.ranks_per_node, master_addr, master_port)


def _spread(spec: RunSpec, nodes: int, per: int, addr: str, port: int) -> list[list[dict[str, Any]]]:
    """``per-node``: one spec per node (NODE_RANK, NPROC_PER_NODE = ``per``); ``per-device``: one spec
    per local rank, global RANK = node * per + LOCAL_RANK."""
    common = replace(
        spec, world_size=nodes * per, local_world_size=per, nnodes=nodes, master_addr=addr, master_port=port
    )
    if spec.launch == "per-node":
        return [[replace(common, node_rank=n, rank=n * per).to_dict()] for n in range(nodes)]
    return [
        [
            replace(common, node_rank=n, rank=n * per + local, local_rank=local).to_dict()
            for local in range(per)
        ]
        for n in range(nodes)
    ]
