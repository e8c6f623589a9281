"""Reading runs: the paged list, one run's detail, and its series.

The list must stay fast with 100k+ runs: one indexed query (keyset paging on the primary key, newest
first) selecting only the columns shown, names joined on primary keys, metrics fetched for the page
only. Filters by name are turned into ids first, so they hit the foreign-key indexes.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.analysis.metrics import get_metric
from backend.db import series_codec
from backend.db.models import Cluster, Release, Run, RunMetric, RunSeries, Variant, Workload
from backend.services import catalog
from backend.services.downsample import minmax_downsample
from backend.services.errors import NotFound, ValidationProblem
from backend.services.studies import progress

MAX_PAGE = 500


@dataclass
class RunFilters:
    release: str | None = None
    variant: str | None = None
    workload: str | None = None
    cluster: str | None = None
    status: str | None = None
    source: str | None = None
    study_id: int | None = None


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"before": last_id}).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        before = json.loads(raw)["before"]
        if not isinstance(before, int) or before < 0:
            raise ValueError
        return before
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ValidationProblem.at("cursor", "not a cursor this server handed out") from None


_COLUMNS = (
    Run.id,
    Run.study_id,
    Run.repeat,
    Run.status,
    Run.source,
    Run.attempt,
    Run.created_at,
    Run.started_at,
    Run.finished_at,
    Run.current_step,
    Run.total_steps,
    Run.latest_throughput,
    Release.image,
    Release.tag,
    Variant.name.label("variant"),
    Workload.name.label("workload"),
    Cluster.name.label("cluster"),
)


def _id_of(session: Session, model: Any, name: str) -> int | None:
    return session.scalar(select(model.id).where(model.name == name))


def list_runs(
    session: Session, filters: RunFilters, *, cursor: str | None = None, limit: int = 50
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of runs, newest first, and the cursor of the next page (None at the end)."""
    limit = max(1, min(limit, MAX_PAGE))
    query = (
        select(*_COLUMNS)
        .join(Release, Run.release_id == Release.id)
        .join(Variant, Run.variant_id == Variant.id)
        .join(Workload, Run.workload_id == Workload.id)
        .join(Cluster, Run.cluster_id == Cluster.id)
    )
    if filters.release:
        release = catalog.find_release(session, filters.release, "release")
        if release is None:
            return [], None
        query = query.where(Run.release_id == release.id)
    for model, name, column in (
        (Variant, filters.variant, Run.variant_id),
        (Workload, filters.workload, Run.workload_id),
        (Cluster, filters.cluster, Run.cluster_id),
    ):
        if name:
            entry_id = _id_of(session, model, name)
            if entry_id is None:
                return [], None
            query = query.where(column == entry_id)
    if filters.status:
        query = query.where(Run.status == filters.status)
    if filters.source:
        query = query.where(Run.source == filters.source)
    if filters.study_id is not None:
        query = query.where(Run.study_id == filters.study_id)
    if cursor:
        query = query.where(Run.id < decode_cursor(cursor))
    rows = session.execute(query.order_by(Run.id.desc()).limit(limit + 1)).all()
    more = len(rows) > limit
    rows = rows[:limit]
    metrics: dict[int, dict[str, float]] = {}
    if rows:
        ids = [r.id for r in rows]
        for run_id, name, value in session.execute(
            select(RunMetric.run_id, RunMetric.name, RunMetric.value).where(RunMetric.run_id.in_(ids))
        ):
            metrics.setdefault(run_id, {})[name] = value
    items = [
        {
            "id": r.id,
            "study_id": r.study_id,
            "release": f"{r.image}:{r.tag}",
            "variant": r.variant,
            "workload": r.workload,
            "cluster": r.cluster,
            "repeat": r.repeat,
            "status": r.status,
            "source": r.source,
            "attempt": r.attempt,
            "created_at": r.created_at,
            "started_at": r.started_at,
            "finished_at": r.finished_at,
            "current_step": r.current_step,
            "total_steps": r.total_steps,
            "progress": progress(r.current_step, r.total_steps, r.status),
            "latest_throughput": r.latest_throughput,
            "metrics": metrics.get(r.id, {}),
        }
        for r in rows
    ]
    return items, (encode_cursor(rows[-1].id) if more else None)


def get_run(session: Session, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise NotFound.at("run_id", f"run {run_id} does not exist")
    return run


def run_detail(session: Session, run_id: int) -> dict[str, Any]:
    """One run with its summary metrics, series summaries (no blobs) and provenance."""
    run = get_run(session, run_id)
    series = session.execute(
        select(
            RunSeries.metric,
            RunSeries.n_points,
            RunSeries.min_value,
            RunSeries.max_value,
            RunSeries.last_value,
        )
        .where(RunSeries.run_id == run.id)
        .order_by(RunSeries.metric)
    ).all()
    return {
        "id": run.id,
        "study_id": run.study_id,
        "release": run.release.ref,
        "variant": run.variant.name,
        "workload": run.workload.name,
        "cluster": run.cluster.name,
        "repeat": run.repeat,
        "status": run.status,
        "source": run.source,
        "attempt": run.attempt,
        "queue_order": run.queue_order,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "current_step": run.current_step,
        "total_steps": run.total_steps,
        "progress": progress(run.current_step, run.total_steps, run.status),
        "latest_throughput": run.latest_throughput,
        "metrics": [{"name": m.name, "value": m.value, "unit": m.unit} for m in run.metrics],
        "series": [
            {
                "metric": s.metric,
                "n_points": s.n_points,
                "min": s.min_value,
                "max": s.max_value,
                "last": s.last_value,
            }
            for s in series
        ],
        "provenance": run.provenance or {},
        "environment": run.environment or {},
        "error": run.error,
        "failure_kind": run.failure_kind,
        "log_tail": run.log_tail,
        "log_path": run.log_path,
    }


def run_series(
    session: Session, run_id: int, metric: str, *, max_points: int | None = None
) -> dict[str, Any]:
    """A run's series of ``metric``, min-max downsampled to ``max_points`` when asked."""
    row = session.execute(
        select(RunSeries.n_points, RunSeries.steps, RunSeries.values).where(
            RunSeries.run_id == run_id, RunSeries.metric == metric
        )
    ).first()
    if row is None:
        get_run(session, run_id)  # 404 naming the run when it is the run that is missing
        raise NotFound.at("metric", f"run {run_id} has no series {metric!r}")
    steps, values = series_codec.unpack(row.steps, row.values)
    downsampled = max_points is not None and values.size > max_points
    if downsampled and max_points is not None:
        steps, values = minmax_downsample(steps, values, max_points)
    unit = session.scalar(select(RunMetric.unit).where(RunMetric.run_id == run_id, RunMetric.name == metric))
    if unit is None and (known := get_metric(metric)) is not None:
        unit = known.unit
    return {
        "run_id": run_id,
        "metric": metric,
        "unit": unit,
        "n_points": int(row.n_points),
        "downsampled": bool(downsampled),
        "steps": np.asarray(steps).tolist(),
        "values": np.asarray(values).tolist(),
    }
