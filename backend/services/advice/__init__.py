"""The checkpointing advisor's service: the workload's shape, its measured runs on the cluster and
those of similar workloads, read from the database and handed to the pure model
(:mod:`ablate.backend.analysis.checkpointing`); the answer names every run it used.

Where the numbers come from (docs/advisor.md has the whole story):

* the **shape**: the workload's ``model`` when it names a torch-llm preset (``llama3-8b``,
  ``deepspeed/llama3-8b``, ...), overridden by its ``runner_options`` (``n_layers``, ``dim``,
  ``n_heads``, ``n_kv_heads``, ``vocab_size``, ``ffn_hidden``, ``gated_mlp``, ``attention``), else
  what its latest run recorded in its provenance (``model_layers``, ``model_dim``, ...);
* **k** of a run: its provenance ``ckpt_layers`` (torch-llm records it, so may CI), else its older
  ``activation_checkpointing: "k/L layers"``, else the variant: no ``ckpt_opt`` means 0, with
  ``ckpt_opt`` the ``ckpt_layers`` runner option, torch-llm's default being all layers;
* **peak memory** of a run: ``peak_memory_reserved_gib`` where recorded (what the allocator really
  holds on a GPU), else ``peak_memory_gib``;
* the **device memory**: ``memory_gib`` as given, else the cluster's ``memory_gib`` label, else a
  table of device models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.analysis import checkpointing as model
from ablate.backend.db.models import Cluster, Release, Run, RunStatus, Workload
from ablate.backend.services import catalog
from ablate.backend.services.advice.result import CheckpointingAdvice, UsedRun
from ablate.backend.services.advice.runs import (
    MEMORY_METRICS,
    ClusterRuns,
    StoredRun,
    run_ckpt_layers,
    run_group,
    target_group,
)
from ablate.backend.services.advice.shapes import DEVICE_MEMORY_GIB, TORCH_LLM, device_memory, workload_shape
from ablate.backend.services.comparison.loading import NOT_EXCLUDED
from ablate.backend.services.errors import ValidationProblem

__all__ = [
    "BASELINE_GIB",
    "DEVICE_MEMORY_GIB",
    "MEMORY_METRICS",
    "TORCH_LLM",
    "CheckpointingAdvice",
    "ClusterRuns",
    "ReleaseAdvice",
    "StoredRun",
    "UsedRun",
    "checkpointing_advice",
    "device_memory",
    "release_advice",
    "run_ckpt_layers",
    "run_group",
    "workload_shape",
]

# What a process holds before the model: python and torch in a CPU run's RSS; on a GPU the
# allocator's own (the CUDA context is not in torch's peak numbers).
BASELINE_GIB = {"cpu": (0.35, 0.25), "gpu": (0.0, 0.5), "ppu": (0.0, 0.5)}


def checkpointing_advice(
    session: Session,
    release_ref: str,
    cluster_name: str,
    workload_name: str,
    *,
    memory_gib: float | None = None,
    utilisation: float = model.DEFAULT_UTILISATION,
) -> CheckpointingAdvice:
    """How many layers of ``workload`` to checkpoint on ``cluster`` for ``release``.

    Unknown release, cluster or workload: NotFound (404). A budget <= 0, a utilisation outside
    (0, 1], a workload without a layer count: ValidationProblem (422).
    """
    if not (math.isfinite(utilisation) and 0 < utilisation <= 1):
        raise ValidationProblem.at("utilisation", f"must be in (0, 1], got {utilisation}")
    if memory_gib is not None and not (math.isfinite(memory_gib) and memory_gib > 0):
        raise ValidationProblem.at("memory_gib", f"must be a positive number of GiB, got {memory_gib}")
    release = catalog.get_release(session, release_ref, "release")
    cluster = catalog.get_named(session, Cluster, cluster_name, "cluster")
    workload = catalog.get_named(session, Workload, workload_name, "workload")
    return _advise(
        session, release, cluster, workload, ClusterRuns(session, cluster), memory_gib, utilisation
    )


def _advise(
    session: Session,
    release: Release,
    cluster: Cluster,
    workload: Workload,
    data: ClusterRuns,
    memory_gib: float | None,
    utilisation: float,
) -> CheckpointingAdvice:
    runs = data.by_workload.get(workload.id, [])
    shape, source = workload_shape(workload, cluster, runs[-1].provenance if runs else None)
    gib, memory_source = device_memory(cluster, memory_gib)
    baseline, baseline_sd = BASELINE_GIB.get(cluster.accelerator, (0.0, 0.5))
    prior = model.memory_prior(shape, baseline_gib=baseline, baseline_sd_gib=baseline_sd)

    observations, used, skipped = data.observe(workload, shape.n_layers)

    similar, similar_used = _similar_workloads(session, cluster, workload, shape, data, baseline, baseline_sd)
    target = target_group(release, runs)
    noise = data.noise(workload.id)
    try:
        advice = model.recommend(
            prior, observations, device_memory_gib=gib, utilisation=utilisation, target_group=target,
            similar=similar, noise=noise,
        )  # fmt: skip
    except ValueError as exc:
        raise ValidationProblem.at("memory_gib", str(exc)) from None
    notes = [noise.memory.describe("peak-memory"), noise.time.describe("step-time")]
    if shape.attention == "flash" and "attention" not in (workload.runner_options or {}):
        notes.append("attention kind not stated: flash assumed (runner_options attention: eager if not)")
    if not any(r.release_id == release.id for r in runs) and runs:
        notes.append(f"no run of {release.ref} yet: its offset from the other releases is unknown")
    in_fit = set(advice.memory_run_ids) | set(advice.time_run_ids)
    similar_ids = set(advice.similar_run_ids)
    return CheckpointingAdvice(
        release=release.ref,
        cluster=cluster.name,
        workload=workload.name,
        shape=shape,
        shape_source=source,
        device_memory_source=memory_source,
        target_group=target,
        advice=advice,
        runs=tuple(u for u in used if u.id in in_fit),
        similar_runs=tuple(u for u in similar_used if u.id in similar_ids),
        skipped_runs=tuple(skipped),
        notes=tuple(notes),
    )


def _similar_workloads(
    session: Session,
    cluster: Cluster,
    workload: Workload,
    shape: model.ModelShape,
    data: ClusterRuns,
    baseline: float,
    baseline_sd: float,
) -> tuple[list[model.SimilarWorkload], list[UsedRun]]:
    """Other workloads on the same cluster whose shape is similar, with their runs."""
    ids = [i for i in data.by_workload if i != workload.id]
    if not ids:
        return [], []
    others = session.scalars(select(Workload).where(Workload.id.in_(ids)).order_by(Workload.name))
    out: list[model.SimilarWorkload] = []
    used: list[UsedRun] = []
    for other in others:
        mine = data.by_workload[other.id]
        try:
            other_shape, _ = workload_shape(other, cluster, mine[-1].provenance)
        except ValidationProblem:
            continue  # a workload without a shape cannot inform per-layer coefficients
        if not model.similar_shapes(shape, other_shape):
            continue
        all_obs, all_used, _ = data.observe(other, other_shape.n_layers)
        obs = [o for o in all_obs if o.peak_memory_gib is not None]
        used += [u for u in all_used if u.peak_memory_gib is not None]
        if obs:
            prior = model.memory_prior(other_shape, baseline_gib=baseline, baseline_sd_gib=baseline_sd)
            out.append(model.SimilarWorkload(other.name, prior, tuple(obs)))
    return out, used


@dataclass(frozen=True)
class ReleaseAdvice:
    """The advice for every (cluster, workload) a release ran, for its report and page."""

    release: str
    items: tuple[CheckpointingAdvice, ...]
    not_advised: tuple[str, ...]  # "cluster / workload: why"


def release_advice(session: Session, release_ref: str) -> ReleaseAdvice:
    """:func:`checkpointing_advice` for each (cluster, workload) with succeeded runs of the release,
    at the cluster's known device memory and the default utilisation; pairs it cannot advise on
    (no layer count, unknown device memory) are listed with the reason."""
    release = catalog.get_release(session, release_ref, "release")
    pairs = session.execute(
        select(Cluster.name, Workload.name)
        .join(Run, Run.cluster_id == Cluster.id)
        .join(Workload, Run.workload_id == Workload.id)
        .where(Run.release_id == release.id, Run.status == RunStatus.succeeded.value, NOT_EXCLUDED)
        .distinct()
        .order_by(Cluster.name, Workload.name)
    ).all()
    items, skipped = [], []
    loaded: dict[str, tuple[Cluster, ClusterRuns]] = {}
    for cluster_name, workload_name in pairs:
        if cluster_name not in loaded:
            cluster = catalog.get_named(session, Cluster, cluster_name, "cluster")
            loaded[cluster_name] = (cluster, ClusterRuns(session, cluster))
        cluster, data = loaded[cluster_name]
        workload = catalog.get_named(session, Workload, workload_name, "workload")
        try:
            items.append(_advise(session, release, cluster, workload, data, None, model.DEFAULT_UTILISATION))
        except ValidationProblem as exc:
            why = exc.errors[0].msg if exc.errors else exc.detail
            skipped.append(f"{cluster_name} / {workload_name}: {why}")
    return ReleaseAdvice(release.ref, tuple(items), tuple(skipped))
