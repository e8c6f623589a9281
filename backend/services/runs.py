"""Reading runs: the paged list, one run's detail, and its series.

The list must stay fast with 100k+ runs: one indexed query (keyset paging on the primary key, newest
first) selecting only the columns shown, names joined on primary keys, metrics fetched for the page
only. Filters by name are turned into ids first, so they hit the foreign-key indexes.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import json
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, TypeVarTuple

import numpy as np
from sqlalchemy import Engine, Row, Select, select
from sqlalchemy.orm import Session

from ablate.backend.db import series_codec
from ablate.backend.db.models import (
    AuditEvent,
    Cluster,
    Release,
    Run,
    RunMetric,
    RunSeries,
    RunSeriesLevel,
    RunStatus,
    Variant,
    Workload,
)
from ablate.backend.domain.metrics import KNOWN_METRICS, get_metric
from ablate.backend.schemas.common import MAX_DB_ID
from ablate.backend.services import catalog, dispatchers
from ablate.backend.services.downsample import minmax_downsample, pyramid_levels
from ablate.backend.services.errors import NotFound, ValidationProblem
from ablate.backend.services.studies import progress

MAX_PAGE = 500
_Ts = TypeVarTuple("_Ts")
_R = TypeVar("_R")


Names = str | Sequence[str] | None


@dataclass
class RunFilters:
    """Filters that combine with AND; a filter by name may list several names (any of them)."""

    release: Names = None
    variant: Names = None
    workload: Names = None
    cluster: Names = None
    status: str | None = None
    source: str | None = None
    study_id: int | None = None
    run_ids: Sequence[int] = ()
    excluded: bool | None = None  # True: only excluded runs, False: only those analyses read

    def names(self, kind: str) -> tuple[str, ...]:
        value = getattr(self, kind)
        if not value:
            return ()
        return (value,) if isinstance(value, str) else tuple(dict.fromkeys(v for v in value if v))


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"before": last_id}).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        before = json.loads(raw)["before"]
        # A row id (an out-of-range one would reach the driver: PostgreSQL's INTEGER overflows).
        if not isinstance(before, int) or not 0 <= before <= MAX_DB_ID:
            raise ValueError
        return before
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ValidationProblem.at("cursor", "not a cursor this server handed out") from None


@dataclass(frozen=True)
class NewestFirst:
    """Keyset paging on a row id, newest first (the run list, the audit log): the rows before the
    cursor's id, ``limit`` clamped to 1..MAX_PAGE, one row more fetched to tell whether a page follows."""

    key: Any  # the id column, e.g. Run.id
    cursor: str | None
    limit: int

    @property
    def size(self) -> int:
        return max(1, min(self.limit, MAX_PAGE))

    def query(self, query: Select[*_Ts]) -> Select[*_Ts]:
        if self.cursor:
            query = query.where(self.key < decode_cursor(self.cursor))
        return query.order_by(self.key.desc()).limit(self.size + 1)

    def cut(self, rows: Sequence[_R], last_id: Callable[[_R], int]) -> tuple[Sequence[_R], str | None]:
        """The page's rows and the next page's cursor (None at the end)."""
        more = len(rows) > self.size
        rows = rows[: self.size]
        return rows, (encode_cursor(last_id(rows[-1])) if more else None)


_COLUMNS = (
    Run.id,
    Run.study_id,
    Run.release_id,
    Run.variant_id,
    Run.workload_id,
    Run.cluster_id,
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
    Run.excluded_at,
    Run.exclusion_reason,
)


class _Names:
    """id <-> name of catalog entries, per engine. Safe to cache: names are never changed or reused
    (there is no rename, and ids are not recycled), so only misses go to the database. This keeps the
    list query on the runs table alone: no joins to plan, nothing but the primary-key index to walk."""

    def __init__(self) -> None:
        self.by_id: dict[str, dict[int, str]] = {k: {} for k in _KINDS}
        self.by_name: dict[str, dict[str, int]] = {k: {} for k in _KINDS}


_KINDS: dict[str, Any] = {"release": Release, "variant": Variant, "workload": Workload, "cluster": Cluster}
_CACHES: weakref.WeakKeyDictionary[Engine, _Names] = weakref.WeakKeyDictionary()


def _cache(session: Session) -> _Names:
    engine = session.get_bind().engine
    names = _CACHES.get(engine)
    if names is None:
        names = _CACHES.setdefault(engine, _Names())
    return names


def _label_columns(kind: str) -> tuple[Any, ...]:
    model = _KINDS[kind]
    return (model.id, model.image, model.tag) if kind == "release" else (model.id, model.name)


def _labels(session: Session, kind: str, ids: set[int]) -> dict[int, str]:
    known = _cache(session).by_id[kind]
    missing = ids - known.keys()
    if missing:
        model = _KINDS[kind]
        for row in session.execute(select(*_label_columns(kind)).where(model.id.in_(missing))):
            label = f"{row[1]}:{row[2]}" if kind == "release" else row[1]
            known[row[0]] = label
            _cache(session).by_name[kind][label] = row[0]
    return known


def _id_for(session: Session, kind: str, name: str) -> int | None:
    cache = _cache(session)
    entry_id = cache.by_name[kind].get(name)
    if entry_id is None:
        if kind == "release":
            release = catalog.find_release(session, name, "release")
            entry_id = release.id if release else None
        else:
            model = _KINDS[kind]
            entry_id = session.scalar(select(model.id).where(model.name == name))
        if entry_id is not None:  # misses are not cached: the entry may be created any moment
            cache.by_name[kind][name] = entry_id
            cache.by_id[kind][entry_id] = name
    return entry_id


def unknown_names(session: Session, filters: RunFilters) -> list[tuple[str, str]]:
    """(kind, name) of every filter name that names nothing, e.g. ``("cluster", "gpu-typo")``."""
    return [
        (kind, name)
        for kind in _KINDS
        for name in filters.names(kind)
        if _id_for(session, kind, name) is None
    ]


def forget_release(session: Session, ref: str, release_id: int) -> None:
    """Drop a deleted release from this process's name cache (SQLite may hand its id out again)."""
    cache = _cache(session)
    cache.by_name["release"].pop(ref, None)
    cache.by_id["release"].pop(release_id, None)


def list_runs(
    session: Session, filters: RunFilters, *, cursor: str | None = None, limit: int = 50
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of runs, newest first, and the cursor of the next page (None at the end)."""
    query = _filtered(session, filters)
    if query is None:
        return [], None
    page = NewestFirst(Run.id, cursor, limit)
    rows, next_cursor = page.cut(session.execute(page.query(query)).all(), lambda row: row[0])
    if not rows:
        return [], None
    return _items(session, rows), next_cursor


def _filtered(session: Session, filters: RunFilters) -> Select[*tuple[Any, ...]] | None:
    """The query of the runs the filters select, or None when a name in them matches nothing."""
    query = select(*_COLUMNS)
    for kind, column in (
        ("release", Run.release_id),
        ("variant", Run.variant_id),
        ("workload", Run.workload_id),
        ("cluster", Run.cluster_id),
    ):
        names = filters.names(kind)
        if names:
            ids = [i for name in names if (i := _id_for(session, kind, name)) is not None]
            if not ids:
                return None
            query = query.where(column.in_(ids))
    if filters.run_ids:
        query = query.where(Run.id.in_(list(filters.run_ids)))
    if filters.status:
        query = query.where(Run.status == filters.status)
    if filters.source:
        query = query.where(Run.source == filters.source)
    if filters.study_id is not None:
        query = query.where(Run.study_id == filters.study_id)
    if filters.excluded is not None:
        query = query.where(Run.excluded_at.is_not(None) if filters.excluded else Run.excluded_at.is_(None))
    return query


def _items(session: Session, rows: Sequence[Row[*tuple[Any, ...]]]) -> list[dict[str, Any]]:
    """The list's items of rows of ``_COLUMNS``: names for ids, summary metrics, progress."""
    metrics: dict[int, dict[str, float]] = {}
    for run_id, name, value in session.execute(
        select(RunMetric.run_id, RunMetric.name, RunMetric.value).where(
            RunMetric.run_id.in_([r[0] for r in rows])
        )
    ):
        metrics.setdefault(run_id, {})[name] = value
    releases = _labels(session, "release", {r[2] for r in rows})
    variants = _labels(session, "variant", {r[3] for r in rows})
    workloads = _labels(session, "workload", {r[4] for r in rows})
    clusters = _labels(session, "cluster", {r[5] for r in rows})
    return [
        {
            "id": run_id,
            "study_id": study_id,
            "release": releases[release_id],
            "variant": variants[variant_id],
            "workload": workloads[workload_id],
            "cluster": clusters[cluster_id],
            "repeat": repeat,
            "status": status,
            "source": source,
            "attempt": attempt,
            "created_at": created_at,
            "started_at": started_at,
            "finished_at": finished_at,
            "current_step": current_step,
            "total_steps": total_steps,
            "progress": progress(current_step, total_steps, status),
            "latest_throughput": latest_throughput,
            "metrics": metrics.get(run_id, {}),
            "excluded_at": excluded_at,
            "exclusion_reason": exclusion_reason,
        }
        for (
            run_id,
            study_id,
            release_id,
            variant_id,
            workload_id,
            cluster_id,
            repeat,
            status,
            source,
            attempt,
            created_at,
            started_at,
            finished_at,
            current_step,
            total_steps,
            latest_throughput,
            excluded_at,
            exclusion_reason,
        ) in rows
    ]


def stored_metric_names(session: Session) -> set[str]:
    """Names of every summary metric any run has (registered and custom)."""
    return set(session.scalars(select(RunMetric.name).distinct()))


def check_metric_names(session: Session, names: Sequence[str], loc: str = "metric") -> None:
    """Refuse names that are neither registered nor stored, suggesting the closest known one."""
    known = set(KNOWN_METRICS) | stored_metric_names(session)
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(sorted(known))}"
            raise ValidationProblem.at(loc, f"unknown metric {name!r}{hint}")


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
        "excluded_at": run.excluded_at,
        "exclusion_reason": run.exclusion_reason,
        # its exclusions and re-inclusions, newest first (services/hygiene.py writes them)
        "exclusions": list(
            session.scalars(
                select(AuditEvent).where(AuditEvent.run_id == run.id).order_by(AuditEvent.id.desc())
            )
        ),
        "waiting": _waiting(session, run),
    }


def _waiting(session: Session, run: Run) -> str | None:
    """Why a queued run does not start, when nothing will start it (no dispatcher serves its cluster)."""
    if run.status != RunStatus.queued.value:
        return None
    return dispatchers.waiting_reasons(session, [run.cluster]).get(run.cluster_id)


def run_series(
    session: Session, run_id: int, metric: str, *, max_points: int | None = None
) -> dict[str, Any]:
    """A run's series of ``metric``, min-max downsampled to ``max_points`` when asked.

    A downsampled read starts from the smallest stored level of at least ``max_points`` points
    (kept at ingest for long series), so it reads a few KiB instead of the whole series."""
    n_points = session.scalar(
        select(RunSeries.n_points).where(RunSeries.run_id == run_id, RunSeries.metric == metric)
    )
    if n_points is None:
        get_run(session, run_id)  # 404 naming the run when it is the run that is missing
        raise NotFound.at("metric", f"run {run_id} has no series {metric!r}")
    downsampled = max_points is not None and n_points > max_points
    blobs = None
    if downsampled and max_points is not None and pyramid_levels(n_points):
        blobs = session.execute(
            select(RunSeriesLevel.steps, RunSeriesLevel.values)
            .where(
                RunSeriesLevel.run_id == run_id,
                RunSeriesLevel.metric == metric,
                RunSeriesLevel.max_points >= max_points,
            )
            .order_by(RunSeriesLevel.max_points)
            .limit(1)
        ).first()
    if blobs is None:
        blobs = session.execute(
            select(RunSeries.steps, RunSeries.values).where(
                RunSeries.run_id == run_id, RunSeries.metric == metric
            )
        ).one()
    steps, values = series_codec.unpack(blobs.steps, blobs.values)
    if downsampled and max_points is not None:
        steps, values = minmax_downsample(steps, values, max_points)
    unit = session.scalar(select(RunMetric.unit).where(RunMetric.run_id == run_id, RunMetric.name == metric))
    if unit is None and (known := get_metric(metric)) is not None:
        unit = known.unit
    return {
        "run_id": run_id,
        "metric": metric,
        "unit": unit,
        "n_points": int(n_points),
        "downsampled": bool(downsampled),
        "steps": np.asarray(steps).tolist(),
        "values": np.asarray(values).tolist(),
    }
