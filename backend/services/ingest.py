"""Storing a run's result: the one code path behind ``POST /api/v1/results`` and the Ray dispatcher.

Both paths hand over the same in-memory result, :class:`~ablate.backend.domain.runner.RunResult`: the
dispatcher gets it from a runner, :func:`submit_results` builds it from each CI result
(:func:`result_from_ci`). :func:`prepare_rows` validates it once (metric registry, finiteness, series
shape) into typed rows, and :func:`write_rows` inserts them with one statement per table.
:func:`record_run_results` finishes a batch of scheduled runs (:func:`record_run_result` is its batch
of one). Summary metrics become one ``run_metrics`` row each; series are packed into two blobs per
(run, metric) with their min/max/last. Everything happens in the caller's transaction: a batch with
one bad result stores nothing.
"""

from __future__ import annotations

import math
import numbers
import re
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel
from sqlalchemy import Engine, delete, func, insert, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from ablate.backend.db import series_codec
from ablate.backend.db.database import Database
from ablate.backend.db.models import (
    Cluster,
    Release,
    Run,
    RunMetric,
    RunSeries,
    RunSeriesLevel,
    RunSource,
    RunStatus,
    Variant,
    Workload,
)
from ablate.backend.domain.metrics import MAX_ABS_VALUE, get_metric, resolve_metric
from ablate.backend.domain.runner import RunResult
from ablate.backend.schemas.catalog import ReleaseCreate
from ablate.backend.schemas.results import MAX_POINTS, MAX_REPEAT, MetricValue, ResultIn, ResultsBatch
from ablate.backend.services import catalog
from ablate.backend.services.catalog import Entry
from ablate.backend.services.downsample import minmax_downsample, pyramid_levels
from ablate.backend.services.errors import Conflict, FieldError, ProblemError, ValidationProblem
from ablate.backend.services.webhooks import watch

THROUGHPUT = "throughput_tokens_per_s"


class MetricRow(NamedTuple):
    name: str
    value: float
    unit: str
    better: str | None  # stored for custom metrics only: the registry decides for known ones


class SeriesRow(NamedTuple):
    metric: str
    n_points: int
    steps: bytes
    values: bytes
    min_value: float | None
    max_value: float | None
    last_value: float | None


class LevelRow(NamedTuple):
    """A long series downsampled to ``max_points`` (min-max buckets), for fast chart reads."""

    metric: str
    max_points: int
    n_points: int
    steps: bytes
    values: bytes


@dataclass
class Rows:
    """A result's metric and series rows, validated and ready to insert."""

    metrics: list[MetricRow] = field(default_factory=list)
    series: list[SeriesRow] = field(default_factory=list)
    levels: list[LevelRow] = field(default_factory=list)

    def metric(self, name: str) -> float | None:
        return next((m.value for m in self.metrics if m.name == name), None)


@dataclass(frozen=True)
class SubmitOutcome:
    run_ids: list[int]
    created: bool


def _join(loc: str, name: str) -> str:
    return f"{loc}.{name}" if loc else name


def prepare_rows(result: RunResult, *, loc: str = "", errors: list[FieldError] | None = None) -> Rows:
    """Validate a result's metrics (registry units and direction, finite, physical bounds) and series.

    Problems are appended to ``errors`` when given (so a batch reports all of them), else raised.
    """
    own: list[FieldError] = [] if errors is None else errors
    start = len(own)
    out = Rows()
    for name, (value, unit) in result.metrics.items():
        where = _join(loc, f"metrics.{name}")
        try:
            definition = resolve_metric(name, unit or None, result.better.get(name))
        except ValueError as exc:
            own.append(FieldError(where, str(exc)))
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            own.append(FieldError(where, f"not a number: {value!r}"))
        elif not math.isfinite(value):
            own.append(FieldError(where, "must be a finite number (no NaN, no infinity)"))
        elif abs(value) > MAX_ABS_VALUE:
            own.append(FieldError(where, f"must be within ±{MAX_ABS_VALUE:g}, got {value!r}"))
        elif definition.non_negative and value < 0:
            own.append(FieldError(where, f"{definition.label} cannot be negative, got {value!r}"))
        elif definition.max_value is not None and value > definition.max_value:
            own.append(FieldError(where, f"must be at most {definition.max_value}, got {value!r}"))
        else:
            better = None if get_metric(name) else definition.direction
            out.metrics.append(MetricRow(name, float(value), definition.unit, better))
    for name, (steps_in, values_in) in result.series.items():
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
        out.series.append(SeriesRow(name, n, steps_blob, values_blob, lo, hi, last))
        for level in pyramid_levels(n):
            level_steps, level_values = minmax_downsample(steps, values, level)
            blobs = series_codec.pack(level_steps, level_values)
            out.levels.append(LevelRow(name, level, int(level_values.size), *blobs))
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
    if np.abs(values).max() > MAX_ABS_VALUE:
        bad = int(np.flatnonzero(np.abs(values) > MAX_ABS_VALUE)[0])
        return f"values[{bad}] must be within ±{MAX_ABS_VALUE:g}, got {float(values[bad])!r}"
    if steps[0] < 0 or (steps.size > 1 and not (np.diff(steps) > 0).all()):
        return "steps must be non-negative and strictly increasing"
    definition = get_metric(name)
    if definition is not None and definition.non_negative and values.min() < 0:
        bad = int(np.flatnonzero(values < 0)[0])
        return f"values[{bad}]: {definition.label} cannot be negative"
    return None


def check_directions(session: Session, rows: Sequence[tuple[str, Rows]]) -> None:
    """Refuse a custom metric whose direction contradicts the one stored for its name (409).

    One name has one direction: otherwise the first row a comparison reads decides, and a step time
    submitted once as ``better: higher`` turns +14% step time into "improved". Every stored row of a
    name carries the same direction (this check keeps it so), so one indexed row per name tells it.
    Two first submissions of a new name racing with opposite directions can both pass; the comparison
    then uses the first row's (docs/results-contract.md).
    """
    given: dict[str, tuple[str, str, str]] = {}  # name -> (direction, unit, where) of its first row
    for loc, r in rows:
        for m in r.metrics:
            if m.better is None:
                continue
            where = _join(loc, f"metrics.{m.name}")
            first = given.setdefault(m.name, (m.better, m.unit, where))
            if first[0] != m.better:
                raise Conflict.at(
                    where,
                    f"metric {m.name!r} is {m.better}-is-better here (unit {m.unit!r}) but "
                    f"{first[0]}-is-better at {first[2]} (unit {first[1]!r}): "
                    "one metric name has one direction",
                )
    for name, (better, unit, where) in sorted(given.items()):
        stored = session.scalar(
            select(RunMetric.better).where(RunMetric.name == name, RunMetric.better.is_not(None)).limit(1)
        )
        if stored is not None and stored != better:
            raise Conflict.at(
                where,
                f"metric {name!r} is stored as {stored}-is-better; this result gives {better}-is-better "
                f"(stated, or read from its unit {unit!r}); one metric name has one direction: state "
                f"better: {stored!r} or use another name",
            )


def write_rows(session: Session, rows: Sequence[tuple[int, Rows]]) -> None:
    """Insert the metric and series rows of already-flushed runs, in bulk (one statement per table)."""
    metric_rows = [{"run_id": run_id, **m._asdict()} for run_id, r in rows for m in r.metrics]
    series_rows = [{"run_id": run_id, **s._asdict()} for run_id, r in rows for s in r.series]
    level_rows = [{"run_id": run_id, **lv._asdict()} for run_id, r in rows for lv in r.levels]
    if metric_rows:
        session.execute(insert(RunMetric), metric_rows)
    if series_rows:
        session.execute(insert(RunSeries), series_rows)
    if level_rows:
        session.execute(insert(RunSeriesLevel), level_rows)


def _check_times(started_at: datetime | None, finished_at: datetime | None, loc: str) -> FieldError | None:
    if started_at and finished_at and finished_at < started_at:
        return FieldError(_join(loc, "finished_at"), "must not be before started_at")
    return None


@dataclass
class FinishedRun:
    """One scheduled run to finish: the run (loaded, held by the caller), its result and when it ran."""

    run: Run
    result: RunResult
    started_at: datetime | None = None
    finished_at: datetime | None = None


class InvalidResults(ValidationProblem):
    """Some results of a batch are invalid; nothing was written. ``by_index`` holds each bad
    result's own problem (field paths relative to that result), by its index in the batch."""

    def __init__(self, detail: str, errors: list[FieldError], by_index: dict[int, ValidationProblem]) -> None:
        super().__init__(detail, errors)
        self.by_index = by_index


def _validate(item: FinishedRun) -> Rows | ValidationProblem:
    if item.result.status not in RunStatus.__members__:
        return ValidationProblem.at("status", f"unknown run status {item.result.status!r}")
    errors: list[FieldError] = []
    rows = prepare_rows(item.result, errors=errors)
    if bad := _check_times(item.started_at, item.finished_at, ""):
        errors.append(bad)
    if errors:
        return ValidationProblem(
            f"invalid result for run {item.run.id}: {errors[0].loc}: {errors[0].msg}", errors
        )
    return rows


def record_run_results(
    session: Session, items: Sequence[FinishedRun], *, refresh_studies: bool = True
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
    rows = [c for c in checked if isinstance(c, Rows)]
    check_directions(session, [(f"[{i}]", r) for i, r in enumerate(rows)])
    for item, r in zip(items, rows, strict=True):
        # A run cancelled meanwhile stays cancelled.
        status = RunStatus.cancelled.value if item.run.status == RunStatus.cancelled else None
        _apply(item.run, item.result, r, item.started_at, item.finished_at, status=status)
    session.flush()  # runs with the same changed columns go out as one executemany UPDATE
    ids = [item.run.id for item in items]
    if not ids:
        return set()
    # A retried attempt replaces what an earlier attempt left behind.
    session.execute(delete(RunMetric).where(RunMetric.run_id.in_(ids)))
    session.execute(delete(RunSeries).where(RunSeries.run_id.in_(ids)))
    session.execute(delete(RunSeriesLevel).where(RunSeriesLevel.run_id.in_(ids)))
    write_rows(session, [(item.run.id, r) for item, r in zip(items, rows, strict=True)])
    for item in items:
        session.expire(item.run, ["metrics", "series"])
    watch.mark_releases(session, {item.run.release_id for item in items})
    study_ids = {item.run.study_id for item in items if item.run.study_id is not None}
    if study_ids and refresh_studies:
        from ablate.backend.services.studies import refresh_study_statuses

        refresh_study_statuses(session, study_ids)
    return study_ids


def record_run_result(
    session: Session,
    run: Run,
    result: RunResult,
    *,
    started_at: datetime | None = None,
    finished_at: datetime | None = None,
) -> None:
    """Finish ``run`` with a result: :func:`record_run_results` for a batch of one.

    Raises :class:`ValidationProblem` naming the bad fields; nothing is written then.
    """
    try:
        record_run_results(session, [FinishedRun(run, result, started_at, finished_at)])
    except InvalidResults as exc:
        raise exc.by_index[0] from None


# A process's output may hold NUL and other control bytes; PostgreSQL cannot store NUL in text.
_CONTROL_BYTES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _storable_text(text: str | None) -> str | None:
    """Log tails and errors as stored: control characters (tabs and line breaks kept) become U+FFFD."""
    return None if text is None else _CONTROL_BYTES.sub("\ufffd", text)


def _apply(
    run: Run,
    result: RunResult,
    rows: Rows,
    started_at: datetime | None,
    finished_at: datetime | None,
    *,
    status: str | None = None,
) -> None:
    """Set a run's columns from its result (the error fields are cleared by a later success)."""
    run.status = status or result.status
    run.error = _storable_text(result.error)
    run.failure_kind = result.failure_kind
    run.provenance = dict(result.provenance)
    run.environment = dict(result.environment)
    for name, value in (
        ("log_tail", _storable_text(result.log_tail) or None),
        ("log_path", result.log_path),
        ("started_at", started_at),
        ("finished_at", finished_at),
    ):
        if value is not None:
            setattr(run, name, value)
    throughput = rows.metric(THROUGHPUT)
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


def result_from_ci(result: ResultIn) -> RunResult:
    """A submitted CI result as the in-memory result every run has (pydantic checked its shape)."""
    metrics: dict[str, tuple[float, str]] = {}
    better: dict[str, str] = {}
    for name, m in result.metrics.items():
        if isinstance(m, MetricValue):
            metrics[name] = (m.value, m.unit)
            if m.better is not None:
                better[name] = m.better
        else:
            metrics[name] = (m, "")
    return RunResult(
        status=result.status,
        metrics=metrics,
        series={name: (s.steps, s.values) for name, s in result.series.items()},
        provenance=dict(result.provenance),
        error=result.error,
        failure_kind=result.failure_kind,
        log_tail=result.log_tail or "",
        environment=dict(result.environment),
        better=better,
    )


def _existing_runs(session: Session, keys: Sequence[str | None]) -> dict[str, int]:
    """Runs a first submission already created under these idempotency keys: key -> run id."""
    wanted = [k for k in keys if k is not None]
    if not wanted:
        return {}
    rows = session.execute(select(Run.idempotency_key, Run.id).where(Run.idempotency_key.in_(wanted)))
    return {k: i for k, i in rows if k is not None}


def _check_keys_distinct(keys: Sequence[str | None]) -> None:
    seen: dict[str, int] = {}
    for i, key in enumerate(keys):
        if key is not None and seen.setdefault(key, i) != i:
            raise ValidationProblem.at(
                f"results[{i}].idempotency_key",
                f"the same key as results[{seen[key]}]; each result needs its own",
            )


def _validated(todo: Sequence[tuple[int, ResultIn, RunResult]]) -> dict[int, Rows]:
    """Every new result's rows, or one problem listing every bad field of the batch."""
    errors: list[FieldError] = []
    rows: dict[int, Rows] = {}
    for i, submitted, result in todo:
        loc = f"results[{i}]"
        rows[i] = prepare_rows(result, loc=loc, errors=errors)
        if result.status == "succeeded" and not result.metrics:
            errors.append(FieldError(f"{loc}.metrics", "a succeeded result needs at least one metric"))
        if bad := _check_times(submitted.started_at, submitted.finished_at, loc):
            errors.append(bad)
    if errors:
        raise ValidationProblem(
            f"{len(errors)} invalid value(s); first: {errors[0].loc}: {errors[0].msg}", errors
        )
    return rows


class CatalogIds:
    """Catalog ids by name, kept per engine so a single-result request needs no lookup statements.

    Safe because names are never changed and clusters, workloads and variants are never deleted.
    A release can be deleted and created again under the same name with a new id: a stale cached id
    then fails the runs' foreign key, and :func:`submit_results_retrying` drops the cache and tries
    again looking every name up. That needs ids that are never handed out again, which holds for
    PostgreSQL's sequences but not for SQLite (a deleted largest id is reused), so on SQLite release
    ids are not cached (its lookups are in-process calls, not round trips). Each server process or
    worker keeps its own cache and finds a stale id by its own foreign-key failure.
    """

    def __init__(self, cache_releases: bool) -> None:
        self.cache_releases = cache_releases
        self.ids: dict[tuple[type, str], int] = {}

    def get(self, model: type, name: str) -> int | None:
        return self.ids.get((model, name))

    def put(self, model: type, name: str, entry_id: int) -> None:
        if model is not Release or self.cache_releases:
            self.ids[(model, name)] = entry_id

    def forget_release(self, ref: str) -> None:
        self.ids.pop((Release, ref), None)

    def clear(self) -> None:
        self.ids.clear()


_CATALOG_IDS: weakref.WeakKeyDictionary[Engine, CatalogIds] = weakref.WeakKeyDictionary()


def catalog_ids(engine: Engine) -> CatalogIds:
    """This process's catalog ids for the engine's database."""
    ids = _CATALOG_IDS.get(engine)
    if ids is None:
        ids = _CATALOG_IDS.setdefault(engine, CatalogIds(cache_releases=engine.dialect.name != "sqlite"))
    return ids


class _CatalogLookup:
    """Catalog entries of one batch, each resolved (or created) once.

    With ``cached``, names given as plain strings are taken from this process's :class:`CatalogIds`
    (no statement when known); without, every name is looked up and the cache refreshed.
    """

    def __init__(self, session: Session, token_scope: str | None, *, cached: bool) -> None:
        self.session = session
        self.may_create_release = token_scope == "admin"
        self.named: dict[tuple[type, str], Any] = {}
        self.releases: dict[str, int] = {}
        self.ids = catalog_ids(session.get_bind().engine)
        self.cached = cached

    def _release_id(self, release: str | ReleaseCreate, loc: str) -> int:
        ref = release if isinstance(release, str) else f"{release.image}:{release.tag}"
        if ref not in self.releases:
            known = self.ids.get(Release, ref) if self.cached and isinstance(release, str) else None
            if known is None:
                known = catalog.resolve_release(
                    self.session, release, loc, may_create=self.may_create_release
                ).id
                self.ids.put(Release, ref, known)
            self.releases[ref] = known
        return self.releases[ref]

    def _named_id(self, model: type[Entry], value: str | BaseModel, loc: str) -> int:
        if self.cached and isinstance(value, str) and (known := self.ids.get(model, value)) is not None:
            return known
        entry = catalog.resolve_named(self.session, model, value, loc, self.named)
        self.ids.put(model, entry.name, entry.id)
        return entry.id

    def run_for(self, result: ResultIn, loc: str, key: str | None) -> Run:
        return Run(
            release_id=self._release_id(result.release, f"{loc}.release"),
            cluster_id=self._named_id(Cluster, result.cluster, f"{loc}.cluster"),
            workload_id=self._named_id(Workload, result.workload, f"{loc}.workload"),
            variant_id=self._named_id(Variant, result.variant, f"{loc}.variant"),
            repeat=result.repeat if result.repeat is not None else -1,  # -1: numbered by _number_repeats
            attempt=1,
            source=RunSource.ci.value,
            idempotency_key=key,
            queue_order=0,
        )


def submit_results(
    session: Session,
    batch: ResultsBatch,
    *,
    token_scope: str | None,
    idempotency_key: str | None,
    optimistic: bool = False,
) -> SubmitOutcome:
    """Store a CI batch as one run per result, or return the runs a first identical submission created.

    ``optimistic`` is the happy path in the fewest statements: it does not look for the keys' runs
    first (the unique index on ``runs.idempotency_key`` refuses a repeat) and takes catalog ids from
    this process's cache. A repeat, a stale cached id or a concurrent winner then fails with an
    :class:`IntegrityError`, after which the caller asks again without ``optimistic``.
    """
    keys = result_keys(batch, idempotency_key)
    existing = {} if optimistic else _existing_runs(session, keys)
    if existing and all(k is not None and k in existing for k in keys):
        return SubmitOutcome([existing[str(k)] for k in keys], created=False)
    _check_keys_distinct(keys)
    todo = [
        (i, submitted, result_from_ci(submitted))
        for i, (submitted, key) in enumerate(zip(batch.results, keys, strict=True))
        if key not in existing
    ]
    rows = _validated(todo)
    check_directions(session, [(f"results[{i}]", r) for i, r in rows.items()])
    lookup = _CatalogLookup(session, token_scope, cached=optimistic)
    runs: dict[int, Run] = {}
    for i, submitted, result in todo:
        run = lookup.run_for(submitted, f"results[{i}]", keys[i])
        _apply(run, result, rows[i], submitted.started_at, submitted.finished_at)
        runs[i] = run
    _number_repeats(session, [(i, runs[i], s.repeat) for i, s, _ in todo], check=not optimistic)
    session.add_all(runs.values())
    session.flush()  # one batched INSERT ... RETURNING for all runs
    write_rows(session, [(runs[i].id, rows[i]) for i, _, _ in todo])
    watch.mark_releases(session, {run.release_id for run in runs.values()})
    ids = [runs[i].id if i in runs else existing[str(keys[i])] for i in range(len(keys))]
    return SubmitOutcome(ids, created=True)


Cell = tuple[int, int, int, int]  # release, cluster, workload, variant ids


def _cell(run: Run) -> Cell:
    return (run.release_id, run.cluster_id, run.workload_id, run.variant_id)


def _number_repeats(session: Session, new: Sequence[tuple[int, Run, int | None]], *, check: bool) -> None:
    """Give each run whose result has no repeat the next free one of its cell, and refuse a repeat
    the cell's CI results already have: a (cell, repeat) names one CI result, so a job that always
    sends repeat 0 cannot pile up copies. The unique index ``uq_runs_ci_cell_repeat`` is the final
    word under concurrency (the loser's retry sees the winner); ``check`` looks the given repeats up
    first so that a duplicate is refused naming the run that holds it."""
    release_ids = {run.release_id for _, run, _ in new}
    explicit = [(i, run, wanted) for i, run, wanted in new if wanted is not None]
    seen: dict[tuple[Cell, int], int] = {}
    for i, run, wanted in explicit:
        first = seen.setdefault((_cell(run), wanted), i)
        if first != i:
            raise ValidationProblem.at(
                f"results[{i}].repeat",
                f"the same cell and repeat as results[{first}]; omit repeat for the next free one",
            )
    if check and explicit:
        rows = session.execute(
            select(Run.id, Run.release_id, Run.cluster_id, Run.workload_id, Run.variant_id, Run.repeat).where(
                Run.source == RunSource.ci.value,
                Run.release_id.in_(release_ids),
                Run.repeat.in_({wanted for _, _, wanted in explicit}),
            )
        )
        held = {((r.release_id, r.cluster_id, r.workload_id, r.variant_id), r.repeat): r.id for r in rows}
        for i, run, wanted in explicit:
            if (holder := held.get((_cell(run), wanted))) is not None:
                raise Conflict.at(
                    f"results[{i}].repeat",
                    f"repeat {wanted} of this cell is already stored as run {holder}; "
                    "each result is stored once: omit repeat to get the next free one",
                )
    auto = [(i, run) for i, run, wanted in new if wanted is None]
    if not auto:
        return
    _lock_numbering(session, {run.release_id for _, run in auto})
    highest: dict[Cell, int] = {}
    tops = session.execute(
        select(Run.release_id, Run.cluster_id, Run.workload_id, Run.variant_id, func.max(Run.repeat))
        .where(Run.source == RunSource.ci.value, Run.release_id.in_(release_ids))
        .group_by(Run.release_id, Run.cluster_id, Run.workload_id, Run.variant_id)
    )
    for release_id, cluster_id, workload_id, variant_id, top in tops:
        highest[(release_id, cluster_id, workload_id, variant_id)] = top
    for _, run, wanted in explicit:  # the batch's own numbers count too
        highest[_cell(run)] = max(highest.get(_cell(run), -1), wanted)
    for i, run in auto:
        run.repeat = highest.get(_cell(run), -1) + 1
        if run.repeat > MAX_REPEAT:
            raise ValidationProblem.at(
                f"results[{i}].repeat", f"the cell has no free repeat up to {MAX_REPEAT}"
            )
        highest[_cell(run)] = run.repeat


# Namespace of the per-release advisory locks that serialise "next free repeat" numbering.
_REPEAT_LOCK = 0x41425250  # "ABRP"


def _lock_numbering(session: Session, release_ids: set[int]) -> None:
    """Serialise the numbering of a release's repeats on PostgreSQL: without it, N jobs at once each
    read the same highest repeat, N-1 lose on the unique index and retry, and the last of many can run
    out of retries. Locks are taken in id order so two batches never wait on each other in a circle;
    SQLite writers are serialised already."""
    if session.get_bind().dialect.name != "postgresql":
        return
    for release_id in sorted(release_ids):
        session.execute(
            text("SELECT pg_advisory_xact_lock(:ns, :key)"), {"ns": _REPEAT_LOCK, "key": release_id}
        )


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

    The first try is optimistic (no idempotency look-up, cached catalog ids). If it fails on a
    constraint, or refuses a batch that carries idempotency keys (a repeat is answered by its first
    submission even when the repeat itself would be refused), the cache is dropped and the batch is
    tried the careful way: on the retry the winner's rows are visible, so the same key returns the
    winner's run ids: twenty clients sending the same batch at once store it exactly once.
    """
    keyed = any(k is not None for k in result_keys(batch, idempotency_key))
    try:
        with database.transaction() as session:
            return submit_results(
                session, batch, token_scope=token_scope, idempotency_key=idempotency_key, optimistic=True
            )
    except ProblemError:
        if not keyed:
            raise
    except DBAPIError as exc:
        if not _retryable(exc):
            raise
        catalog_ids(database.engine).clear()
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
