"""Storing a run's result: the one code path behind ``POST /api/v1/results`` and the Ray dispatcher.

:func:`record_run_results` finishes a batch of runs (the dispatcher's path; :func:`record_run_result` is
its batch of one); :func:`submit_results` creates runs from a CI batch. Both validate through
:func:`prepare_result` and write through :func:`write_results`, so a result is checked and stored the
same way wherever it comes from. Summary metrics become one ``run_metrics`` row each; series are
packed into two blobs per (run, metric) with their min/max/last.
Everything happens in the caller's transaction: a batch with one bad result stores nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import delete, insert, select
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from ablate.backend.analysis.metrics import get_metric, resolve_metric
from ablate.backend.db import series_codec
from ablate.backend.db.database import Database
from ablate.backend.db.models import (
    Cluster,
    Release,
    Run,
    RunMetric,
    RunSeries,
    RunSource,
    RunStatus,
    Variant,
    Workload,
)
from ablate.backend.schemas.results import MAX_POINTS, MetricValue, ResultIn, ResultsBatch
from ablate.backend.services import catalog
from ablate.backend.services.errors import FieldError, ValidationProblem

THROUGHPUT = "throughput_tokens_per_s"


@dataclass
class PreparedResult:
    """A result's metrics and series, validated and ready to insert."""

    metrics: list[tuple[str, float, str]] = field(default_factory=list)
    # (metric, n_points, steps blob, values blob, min, max, last)
    series: list[tuple[str, int, bytes, bytes, float | None, float | None, float | None]] = field(
        default_factory=list
    )

    def metric(self, name: str) -> float | None:
        return next((v for n, v, _ in self.metrics if n == name), None)


@dataclass(frozen=True)
class SubmitOutcome:
    run_ids: list[int]
    created: bool


def _join(loc: str, name: str) -> str:
    return f"{loc}.{name}" if loc else name


def prepare_result(
    metrics: Mapping[str, tuple[float, str | None]],
    series: Mapping[str, tuple[Sequence[int], Sequence[float]]],
    *,
    loc: str = "",
    errors: list[FieldError] | None = None,
) -> PreparedResult:
    """Validate metrics (finite, units per the registry, physical quantities not negative) and series.

    Problems are appended to ``errors`` when given (so a batch reports all of them), else raised.
    """
    own: list[FieldError] = [] if errors is None else errors
    start = len(own)
    out = PreparedResult()
    for name, (value, unit) in metrics.items():
        where = _join(loc, f"metrics.{name}")
        try:
            definition = resolve_metric(name, unit)
        except ValueError as exc:
            own.append(FieldError(where, str(exc)))
            continue
        try:
            value = float(value)
        except (TypeError, ValueError):
            own.append(FieldError(where, f"not a number: {value!r}"))
            continue
        if not math.isfinite(value):
            own.append(FieldError(where, "must be a finite number (no NaN, no infinity)"))
        elif definition.non_negative and value < 0:
            own.append(FieldError(where, f"{definition.label} cannot be negative, got {value!r}"))
        elif definition.max_value is not None and value > definition.max_value:
            own.append(FieldError(where, f"must be at most {definition.max_value}, got {value!r}"))
        else:
            out.metrics.append((name, value, definition.unit))
    for name, (steps_in, values_in) in series.items():
        where = _join(loc, f"series.{name}")
        try:
            steps = np.asarray(steps_in, dtype=np.int64)
            values = np.asarray(values_in, dtype=np.float64)
        except (OverflowError, TypeError, ValueError) as exc:
            own.append(FieldError(where, f"steps must be integers and values numbers: {exc}"))
            continue
        problem = _series_problem(name, steps, values)
        if problem:
            own.append(FieldError(where, problem))
            continue
        steps_blob, values_blob = series_codec.pack(steps, values)
        n = int(values.size)
        lo, hi, last = (
            (float(values.min()), float(values.max()), float(values[-1])) if n else (None, None, None)
        )
        out.series.append((name, n, steps_blob, values_blob, lo, hi, last))
    if errors is None and len(own) > start:
        raise ValidationProblem(f"{len(own)} invalid value(s): {own[0].loc}: {own[0].msg}", own)
    return out


def _series_problem(name: str, steps: np.ndarray, values: np.ndarray) -> str | None:
    if steps.ndim != 1 or values.ndim != 1 or steps.shape != values.shape:
        return f"steps and values must be lists of equal length, got {steps.size} and {values.size}"
    if values.size > MAX_POINTS:
        return f"at most {MAX_POINTS} points per series, got {values.size}"
    if values.size == 0:
        return None
    if not np.isfinite(values).all():
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        return f"values[{bad}] must be a finite number (no NaN, no infinity)"
    if steps[0] < 0 or (steps.size > 1 and not (np.diff(steps) > 0).all()):
        return "steps must be non-negative and strictly increasing"
    definition = get_metric(name)
    if definition is not None and definition.non_negative and values.min() < 0:
        bad = int(np.flatnonzero(values < 0)[0])
        return f"values[{bad}]: {definition.label} cannot be negative"
    return None


def write_results(session: Session, prepared: Sequence[tuple[int, PreparedResult]]) -> None:
    """Insert the metric and series rows of already-flushed runs, in bulk (one statement per table)."""
    metric_rows = [
        {"run_id": run_id, "name": n, "value": v, "unit": u}
        for run_id, p in prepared
        for n, v, u in p.metrics
    ]
    series_rows = [
        {
            "run_id": run_id,
            "metric": m,
            "n_points": n,
            "steps": s,
            "values": v,
            "min_value": lo,
            "max_value": hi,
            "last_value": last,
        }
        for run_id, p in prepared
        for m, n, s, v, lo, hi, last in p.series
    ]
    if metric_rows:
        session.execute(insert(RunMetric), metric_rows)
    if series_rows:
        session.execute(insert(RunSeries), series_rows)


def _check_times(started_at: datetime | None, finished_at: datetime | None, loc: str) -> FieldError | None:
    if started_at and finished_at and finished_at < started_at:
        return FieldError(_join(loc, "finished_at"), "must not be before started_at")
    return None


@dataclass
class RunResultIn:
    """One finished run to record: the run (loaded, held by the caller) and its result."""

    run: Run
    status: str
    metrics: Mapping[str, tuple[float, str | None]]
    series: Mapping[str, tuple[Sequence[int], Sequence[float]]]
    provenance: dict[str, Any]
    environment: dict[str, Any] | None
    error: str | None
    failure_kind: str | None
    log_tail: str | None
    log_path: str | None
    started_at: datetime | None
    finished_at: datetime | None


class InvalidResults(ValidationProblem):
    """Some results of a batch are invalid; nothing was written. ``by_index`` holds each bad
    result's own problem (field paths relative to that result), by its index in the batch."""

    def __init__(self, detail: str, errors: list[FieldError], by_index: dict[int, ValidationProblem]) -> None:
        super().__init__(detail, errors)
        self.by_index = by_index


def _validate(item: RunResultIn) -> PreparedResult | ValidationProblem:
    if item.status not in RunStatus.__members__:
        return ValidationProblem.at("status", f"unknown run status {item.status!r}")
    errors: list[FieldError] = []
    prepared = prepare_result(item.metrics, item.series, errors=errors)
    if bad := _check_times(item.started_at, item.finished_at, ""):
        errors.append(bad)
    if errors:
        return ValidationProblem(
            f"invalid result for run {item.run.id}: {errors[0].loc}: {errors[0].msg}", errors
        )
    return prepared


def record_run_results(
    session: Session, items: Sequence[RunResultIn], *, refresh_studies: bool = True
) -> set[int]:
    """Finish a batch of runs: validate every result, then replace their metrics and series and set
    their fields with one statement per table, and refresh each affected study's status once.
    Returns the ids of the affected studies; with ``refresh_studies=False`` the caller refreshes them
    itself (once, after its other changes in the same transaction).

    All or nothing: if any result is invalid, :class:`InvalidResults` is raised and nothing is written.
    A run cancelled meanwhile stays cancelled (its data is still kept: it says how far it got).
    """
    checked = [_validate(item) for item in items]
    bad = {i: c for i, c in enumerate(checked) if isinstance(c, ValidationProblem)}
    if bad:
        errors = [replace(e, loc=f"[{i}].{e.loc}") for i, p in bad.items() for e in p.errors]
        first = next(iter(bad.values()))
        raise InvalidResults(f"{len(bad)} invalid result(s); first: {first.detail}", errors, bad)
    prepared = [c for c in checked if isinstance(c, PreparedResult)]
    for item, p in zip(items, prepared, strict=True):
        run = item.run
        _set_fields(
            run,
            status=RunStatus.cancelled.value if run.status == RunStatus.cancelled else item.status,
            provenance=item.provenance,
            environment=item.environment,
            error=item.error,
            failure_kind=item.failure_kind,
            log_tail=item.log_tail,
            log_path=item.log_path,
            started_at=item.started_at,
            finished_at=item.finished_at,
            prepared=p,
        )
    session.flush()  # runs with the same changed columns go out as one executemany UPDATE
    ids = [item.run.id for item in items]
    if not ids:
        return set()
    # A retried attempt replaces what an earlier attempt left behind.
    session.execute(delete(RunMetric).where(RunMetric.run_id.in_(ids)))
    session.execute(delete(RunSeries).where(RunSeries.run_id.in_(ids)))
    write_results(session, [(item.run.id, p) for item, p in zip(items, prepared, strict=True)])
    for item in items:
        session.expire(item.run, ["metrics", "series"])
    study_ids = {item.run.study_id for item in items if item.run.study_id is not None}
    if study_ids and refresh_studies:
        from ablate.backend.services.studies import refresh_study_statuses

        refresh_study_statuses(session, study_ids)
    return study_ids


def record_run_result(
    session: Session,
    run: Run,
    *,
    status: str,
    metrics: dict[str, tuple[float, str]],
    series: dict[str, tuple[Sequence[int], Sequence[float]]],
    provenance: dict[str, Any],
    environment: dict[str, Any] | None,
    error: str | None,
    failure_kind: str | None,
    log_tail: str | None,
    log_path: str | None,
    started_at: datetime | None,
    finished_at: datetime | None,
) -> None:
    """Finish ``run`` with a result: :func:`record_run_results` for a batch of one.

    Raises :class:`ValidationProblem` naming the bad fields; nothing is written then.
    """
    item = RunResultIn(
        run=run,
        status=status,
        metrics=metrics,
        series=series,
        provenance=provenance,
        environment=environment,
        error=error,
        failure_kind=failure_kind,
        log_tail=log_tail,
        log_path=log_path,
        started_at=started_at,
        finished_at=finished_at,
    )
    try:
        record_run_results(session, [item])
    except InvalidResults as exc:
        raise exc.by_index[0] from None


def _set_fields(
    run: Run, *, prepared: PreparedResult, environment: dict[str, Any] | None, **values: Any
) -> None:
    for name, value in values.items():
        if value is not None or name in {"error", "failure_kind"}:
            setattr(run, name, value)
    if environment is not None:
        run.environment = environment
    throughput = prepared.metric(THROUGHPUT)
    if throughput is not None:
        run.latest_throughput = throughput
    if run.status == RunStatus.succeeded and run.total_steps is not None:
        run.current_step = run.total_steps


# CI batches -------------------------------------------------------------------------------------


def result_keys(batch: ResultsBatch, idempotency_key: str | None) -> list[str | None]:
    """Each result's key: its own, else the request's key and its index (a retry sends the same file)."""
    return [
        r.idempotency_key or (f"{idempotency_key}#{i}" if idempotency_key else None)
        for i, r in enumerate(batch.results)
    ]


def _metrics_of(result: ResultIn) -> dict[str, tuple[float, str | None]]:
    return {
        name: (m.value, m.unit) if isinstance(m, MetricValue) else (m, None)
        for name, m in result.metrics.items()
    }


def submit_results(
    session: Session, batch: ResultsBatch, *, token_scope: str | None, idempotency_key: str | None
) -> SubmitOutcome:
    """Store a CI batch as one run per result, or return the runs a first identical submission created."""
    keys = result_keys(batch, idempotency_key)
    wanted = [k for k in keys if k is not None]
    existing: dict[str, int] = {}
    if wanted:
        rows = session.execute(select(Run.idempotency_key, Run.id).where(Run.idempotency_key.in_(wanted)))
        existing = {k: i for k, i in rows if k is not None}
    if wanted and len(wanted) == len(keys) and all(k in existing for k in keys):
        return SubmitOutcome([existing[k] for k in keys if k is not None], created=False)

    seen: dict[str, int] = {}
    for i, key in enumerate(keys):
        if key is not None and seen.setdefault(key, i) != i:
            loc = f"results[{i}].idempotency_key"
            raise ValidationProblem.at(
                loc, f"the same key as results[{seen[key]}]; each result needs its own"
            )
    todo = [(i, r, k) for i, (r, k) in enumerate(zip(batch.results, keys, strict=True)) if k not in existing]
    errors: list[FieldError] = []
    prepared: dict[int, PreparedResult] = {}
    for i, result, _ in todo:
        loc = f"results[{i}]"
        series = {name: (s.steps, s.values) for name, s in result.series.items()}
        prepared[i] = prepare_result(_metrics_of(result), series, loc=loc, errors=errors)
        if result.status == "succeeded" and not result.metrics:
            errors.append(FieldError(f"{loc}.metrics", "a succeeded result needs at least one metric"))
        if bad := _check_times(result.started_at, result.finished_at, loc):
            errors.append(bad)
    if errors:
        raise ValidationProblem(
            f"{len(errors)} invalid value(s); first: {errors[0].loc}: {errors[0].msg}", errors
        )

    cache: dict[tuple[type, str], Any] = {}
    releases: dict[str, Release] = {}
    runs: dict[int, Run] = {}
    for i, result, key in todo:
        loc = f"results[{i}]"
        ref = (
            result.release
            if isinstance(result.release, str)
            else f"{result.release.image}:{result.release.tag}"
        )
        release = releases.get(ref)
        if release is None:
            release = catalog.resolve_release(
                session, result.release, f"{loc}.release", may_create=token_scope == "admin"
            )
            releases[ref] = release
        cluster = catalog.resolve_named(session, Cluster, result.cluster, f"{loc}.cluster", cache)
        workload = catalog.resolve_named(session, Workload, result.workload, f"{loc}.workload", cache)
        variant = catalog.resolve_named(session, Variant, result.variant, f"{loc}.variant", cache)
        run = Run(
            release_id=release.id,
            cluster_id=cluster.id,
            workload_id=workload.id,
            variant_id=variant.id,
            repeat=result.repeat,
            attempt=1,
            source=RunSource.ci.value,
            idempotency_key=key,
            queue_order=0,
            provenance={},
            environment={},
        )
        _set_fields(
            run,
            status=result.status,
            provenance=dict(result.provenance),
            environment=dict(result.environment),
            error=result.error,
            failure_kind=result.failure_kind,
            log_tail=result.log_tail,
            log_path=None,
            started_at=result.started_at,
            finished_at=result.finished_at,
            prepared=prepared[i],
        )
        runs[i] = run
    session.add_all(runs.values())
    session.flush()  # one batched INSERT ... RETURNING for all runs
    write_results(session, [(runs[i].id, prepared[i]) for i, _, _ in todo])
    ids = [runs[i].id if i in runs else existing[str(keys[i])] for i in range(len(keys))]
    return SubmitOutcome(ids, created=True)


# Errors after which the whole batch is simply tried again: a concurrent submission won a unique
# constraint (same idempotency key, or the same new cluster), or the database asks for a retry.
_RETRY_SQLSTATES = {"40001", "40P01"}


def _retryable(exc: DBAPIError) -> bool:
    if isinstance(exc, IntegrityError):
        return True
    sqlstate = getattr(getattr(exc, "orig", None), "sqlstate", None)
    return sqlstate in _RETRY_SQLSTATES or "database is locked" in str(exc.orig)


def submit_results_retrying(
    database: Database,
    batch: ResultsBatch,
    *,
    token_scope: str | None,
    idempotency_key: str | None,
    attempts: int = 5,
) -> SubmitOutcome:
    """:func:`submit_results` in its own transaction, tried again when a concurrent one got there first.

    On the retry the winner's rows are visible, so the same key returns the winner's run ids: twenty
    clients sending the same batch at once store it exactly once.
    """
    for attempt in range(attempts):
        try:
            with database.transaction() as session:
                return submit_results(
                    session, batch, token_scope=token_scope, idempotency_key=idempotency_key
                )
        except DBAPIError as exc:
            if attempt == attempts - 1 or not _retryable(exc):
                raise
            time.sleep(0.01 * (attempt + 1))
    raise AssertionError("unreachable")
