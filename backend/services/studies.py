"""Studies: a plan becomes one queued run per (variant, workload, repeat), in an interleaved order.

Why interleave: machines drift (thermals, neighbours, clock boosts). If all repeats of a variant ran
back to back, drift over the study would show up as an effect of whichever variant ran last. Repeats
therefore go round by round (repeat 0 of every cell, then repeat 1, ...), each workload's variants
adjacent in time, and the variant order within a round shuffled by a seeded RNG whose seed is stored
in ``Study.order_seed`` so the order can be reproduced and audited.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.orm import Session

from ablate.backend.db.base import utcnow
from ablate.backend.db.models import (
    NAME,
    Cluster,
    Release,
    Run,
    RunStatus,
    Study,
    StudyStatus,
    Variant,
    Workload,
)
from ablate.backend.domain.runner import DEFAULT_RUNNER, get_runner
from ablate.backend.domain.states import is_terminal
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import adaptive, catalog, dispatchers
from ablate.backend.services.errors import NotFound, ValidationProblem
from ablate.backend.services.run_queue import queue_runs
from ablate.backend.services.sweeps import check_ckpt_layers
from ablate.backend.services.webhooks import events as webhook_events

plans_log = logging.getLogger("ablate.plans")

# Serialises queue_order allocation between concurrent study creations on PostgreSQL.
_QUEUE_LOCK = 0x41424C54  # "ABLT"


def default_name(release_ref: str, cluster_name: str) -> str:
    """ "IMAGE:TAG on CLUSTER", cut with an ellipsis to the column (a 200-character image and cluster
    name are allowed, and PostgreSQL refuses a longer value where SQLite would store it whole)."""
    name = f"{release_ref} on {cluster_name}"
    return name if len(name) <= NAME else name[: NAME - 1] + "\u2026"


def interleaved_cells(
    n_variants: int, n_workloads: int, repeats: int, seed: int
) -> list[tuple[int, int, int]]:
    """(variant index, workload index, repeat) in queue order: round by round, variants shuffled."""
    rng = random.Random(seed)
    cells: list[tuple[int, int, int]] = []
    for repeat in range(repeats):
        for w in range(n_workloads):
            order = list(range(n_variants))
            rng.shuffle(order)
            cells.extend((v, w, repeat) for v in order)
    return cells


def create_study(session: Session, plan: StudyPlan) -> Study:
    """Resolve the plan's catalog entries, check every factor with its runner, queue the runs."""
    # Logged where the study is made, not when a plan is read: the CLI reads the plan too and then
    # prints the server's warnings, so a warning at validation showed twice.
    for message in plan.advisories():
        plans_log.warning("plan %s: %s", plan.name or plan.release, message)
    release = catalog.get_release(session, plan.release, "release")
    baseline = catalog.get_release(session, plan.baseline, "baseline") if plan.baseline else None
    if baseline is not None and baseline.id == release.id:
        raise ValidationProblem.at("baseline", "a release cannot be its own baseline")
    cache: dict[tuple[type, str], Any] = {}
    cluster = catalog.resolve_named(session, Cluster, plan.cluster, "cluster", cache)
    variants = [
        catalog.resolve_named(session, Variant, v, f"variants[{i}]", cache)
        for i, v in enumerate(plan.variants)
    ]
    workloads = [
        catalog.resolve_named(session, Workload, w, f"workloads[{i}]", cache)
        for i, w in enumerate(plan.workloads)
    ]
    _refuse_duplicates([v.name for v in variants], "variants")
    _refuse_duplicates([w.name for w in workloads], "workloads")
    _check_factors(cluster, variants, workloads)
    _check_images(cluster, variants)
    check_ckpt_layers(variants, workloads)

    seed = plan.order_seed if plan.order_seed is not None else random.SystemRandom().randrange(2**31)
    study = Study(
        name=plan.name or default_name(release.ref, cluster.name),
        release_id=release.id,
        cluster_id=cluster.id,
        repeats=plan.max_repeats,
        plan={**plan.model_dump(mode="json"), "order_seed": seed},
        order_seed=seed,
        status=StudyStatus.queued.value,
        created_by=plan.created_by,
    )
    session.add(study)
    # Flushing first takes SQLite's write lock, so the max() below cannot race another writer there.
    session.flush()
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _QUEUE_LOCK})
    cells = interleaved_cells(len(variants), len(workloads), plan.first_rounds, seed)
    queue = _with_baseline(cells, release, baseline, seed)
    queue_runs(
        session, study, ((side.id, variants[v].id, workloads[w].id, repeat) for v, w, repeat, side in queue)
    )
    return study


def _with_baseline(
    cells: list[tuple[int, int, int]], release: Release, baseline: Release | None, seed: int
) -> list[tuple[int, int, int, Release]]:
    """Each cell once for the release or, with a baseline, once for each, the pair back to back in a
    seeded random order (which goes first must not line up with drift within the session)."""
    if baseline is None:
        return [(*cell, release) for cell in cells]
    rng = random.Random(seed ^ 0x5EED)
    out: list[tuple[int, int, int, Release]] = []
    for cell in cells:
        pair = [release, baseline]
        rng.shuffle(pair)
        out.extend((*cell, side) for side in pair)
    return out


def _check_images(cluster: Cluster, variants: list[Variant]) -> None:
    """A variant's own image needs a cluster that runs containers: on the host it would not be used."""
    if cluster.container:
        return
    for index, variant in enumerate(variants):
        if variant.image:
            raise ValidationProblem.at(
                f"variants[{index}].image",
                f"variant {variant.name!r} runs in image {variant.image!r}, but cluster {cluster.name!r} "
                "has no container runtime: define container: {runtime: podman} (or docker) on the cluster",
            )


def _refuse_duplicates(names: list[str], loc: str) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise ValidationProblem.at(f"{loc}[{i}]", f"{name!r} is listed twice")
        seen.add(name)


def _check_factors(cluster: Cluster, variants: list[Variant], workloads: list[Workload]) -> None:
    """Refuse a plan whose runner cannot really implement a variant's factor on this cluster."""
    for w_index, workload in enumerate(workloads):
        name = workload.runner or DEFAULT_RUNNER
        try:
            runner = get_runner(name)
        except ValueError as exc:
            raise ValidationProblem.at(f"workloads[{w_index}].runner", str(exc)) from None
        for v_index, variant in enumerate(variants):
            problem = runner.check_factors(variant.factors or [], cluster.accelerator)
            if problem:
                raise ValidationProblem.at(
                    f"variants[{v_index}].factors",
                    f"variant {variant.name!r} (workload {workload.name!r}): {problem}",
                )


def get_study(session: Session, study_id: int) -> Study:
    study = session.get(Study, study_id)
    if study is None:
        raise NotFound.at("study_id", f"study {study_id} does not exist")
    return study


def derive_status(statuses: Counter[str]) -> StudyStatus:
    """A study's status from its runs' statuses."""
    active = statuses[RunStatus.running] + statuses[RunStatus.queued]
    total = sum(statuses.values())
    if total == 0:
        return StudyStatus.queued
    if statuses[RunStatus.running] or (statuses[RunStatus.queued] and active < total):
        return StudyStatus.running
    if statuses[RunStatus.queued]:
        return StudyStatus.queued
    if statuses[RunStatus.cancelled]:
        return StudyStatus.cancelled
    if statuses[RunStatus.failed]:
        return StudyStatus.failed
    return StudyStatus.succeeded


def refresh_study_status(session: Session, study: Study | int) -> str:
    """Recompute ``study.status`` (and ``finished_at``) from its runs; returns the new status."""
    if isinstance(study, int):
        study = get_study(session, study)
    return _refresh(session, [study])[study.id]


def refresh_study_statuses(session: Session, study_ids: Iterable[int]) -> dict[int, str]:
    """:func:`refresh_study_status` for several studies with one counting query; returns the statuses.
    Ids of studies that do not exist are skipped."""
    ids = sorted(set(study_ids))
    if not ids:
        return {}
    session.flush()
    # The studies and their runs' counts by status in one query (one round trip, not two).
    rows = session.execute(
        select(Study, Run.status, func.count(Run.id))
        .outerjoin(Run, Run.study_id == Study.id)
        .where(Study.id.in_(ids))
        .group_by(Study.id, Run.status)
    ).all()
    found = list(dict.fromkeys(study for study, _, _ in rows))
    counts: dict[int, Counter[str]] = {s.id: Counter() for s in found}
    for study, status_, n in rows:
        if status_ is not None:  # a study without runs: one row, no status
            counts[study.id][status_] = n
    return _refresh(session, found, counts)


def _count_runs(session: Session, study_ids: list[int]) -> dict[int, Counter[str]]:
    counts: dict[int, Counter[str]] = {i: Counter() for i in study_ids}
    rows = session.execute(
        select(Run.study_id, Run.status, func.count())
        .where(Run.study_id.in_(study_ids))
        .group_by(Run.study_id, Run.status)
    )
    for study_id, status_, n in rows:
        if study_id is not None:  # selected by study id: never None, but the column is nullable
            counts[study_id][status_] = n
    return counts


def _refresh(
    session: Session, found: list[Study], counts: dict[int, Counter[str]] | None = None
) -> dict[int, str]:
    """Set each study's status from its runs' ``counts`` by status (counted here when not given, or
    again once an adaptive study queued its next round)."""
    session.flush()
    advanced = False
    for study in found:
        # Adaptive plans: once a round is complete, queue the next one for the undecided rungs.
        if adaptive.is_adaptive(study):
            adaptive.advance(session, study, queue_lock=_QUEUE_LOCK)
            advanced = True
    if counts is None or advanced:
        counts = _count_runs(session, [s.id for s in found])
    out: dict[int, str] = {}
    for study in found:
        status = derive_status(counts[study.id])
        if study.status != status.value:
            study.status = status.value
        terminal = is_terminal(status)
        if terminal and study.finished_at is None:
            study.finished_at = utcnow()
            # In this transaction: the event is committed exactly when the study's end is.
            webhook_events.study_ended(session, study, counts[study.id])
        elif not terminal and study.finished_at is not None:
            study.finished_at = None
        out[study.id] = status.value
    session.flush()
    return out


def cancel_study(session: Session, study_id: int) -> Study:
    """Queued runs are cancelled; running runs are marked cancelled and the dispatcher stops them."""
    study = get_study(session, study_id)
    now: datetime = utcnow()
    session.execute(
        update(Run)
        .where(Run.study_id == study.id, Run.status == RunStatus.queued.value)
        .values(status=RunStatus.cancelled.value, finished_at=now, updated_at=now)
    )
    session.execute(
        update(Run)
        .where(Run.study_id == study.id, Run.status == RunStatus.running.value)
        .values(status=RunStatus.cancelled.value, updated_at=now)
    )
    session.expire_all()
    refresh_study_status(session, study)
    return study


def list_studies(session: Session, *, limit: int = 100) -> list[Study]:
    return list(session.scalars(select(Study).order_by(Study.id.desc()).limit(limit)))


def _study_key(study: Study) -> dict[str, Any]:
    """What a study is, first in each of its views (the list's and the detail's)."""
    return {
        "id": study.id,
        "name": study.name,
        "status": study.status,
        "release": study.release.ref,
        "cluster": study.cluster.name,
        "repeats": study.repeats,
    }


def study_summary(study: Study) -> dict[str, Any]:
    """A study as the lists show it: ``GET /studies`` and the dashboard's studies and home pages."""
    return {**_study_key(study), "created_at": study.created_at, "finished_at": study.finished_at}


def study_matrix(session: Session, study: Study) -> dict[str, Any]:
    """The study with its runs in queue order: what the study page and ``GET /studies/{id}`` show."""
    rows = session.execute(
        select(Run, Variant.name, Workload.name, Release.image, Release.tag)
        .join(Variant, Run.variant_id == Variant.id)
        .join(Workload, Run.workload_id == Workload.id)
        .join(Release, Run.release_id == Release.id)
        .where(Run.study_id == study.id)
        .order_by(Run.queue_order)
    ).all()
    runs = [
        {
            "id": run.id,
            "release": f"{image}:{tag}",
            "variant": variant,
            "workload": workload,
            "repeat": run.repeat,
            "status": run.status,
            "attempt": run.attempt,
            "queue_order": run.queue_order,
            "current_step": run.current_step,
            "total_steps": run.total_steps,
            "progress": progress(run.current_step, run.total_steps, run.status),
            "latest_throughput": run.latest_throughput,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "error": run.error,
            "failure_kind": run.failure_kind,
            "excluded_at": run.excluded_at,
            "exclusion_reason": run.exclusion_reason,
        }
        for run, variant, workload, image, tag in rows
    ]
    plan = study.plan or {}
    return {
        **_study_key(study),
        "order_seed": study.order_seed,
        "variants": _plan_names(plan.get("variants"), runs, "variant"),
        "workloads": _plan_names(plan.get("workloads"), runs, "workload"),
        "counts": dict(Counter(r["status"] for r in runs)),
        "created_by": study.created_by,
        "created_at": study.created_at,
        "finished_at": study.finished_at,
        "plan": plan,
        "runs": runs,
        "adaptive": adaptive.summary(session, study),  # None for a fixed repeats count
        # Queued runs wait for nothing, and running ones are neither finished nor reaped, while no
        # dispatcher serves the cluster.
        "waiting": (
            dispatchers.waiting_reasons(session, [study.cluster]).get(study.cluster_id)
            if any(r["status"] in (RunStatus.queued.value, RunStatus.running.value) for r in runs)
            else None
        ),
    }


def _plan_names(items: Any, runs: list[dict[str, Any]], key: str) -> list[str]:
    if isinstance(items, list) and items:
        return [i if isinstance(i, str) else str(i.get("name")) for i in items]
    return list(dict.fromkeys(r[key] for r in runs))


def progress(current: int | None, total: int | None, status: str) -> float | None:
    if status == RunStatus.succeeded:
        return 1.0
    if current is None or not total:
        return None
    return max(0.0, min(1.0, current / total))
