"""A result's metric and series rows: validated once (:func:`prepare_rows`), inserted in bulk
(:func:`write_rows`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, cast

import numpy as np
import psycopg
from sqlalchemy import Table, insert, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from ablate.backend.db import series_codec
from ablate.backend.db.models import (
    RunMetric,
    RunSeries,
    RunSeriesLevel,
)
from ablate.backend.domain.metrics import MAX_ABS_VALUE, get_metric, resolve_metric
from ablate.backend.domain.runner import RunResult
from ablate.backend.schemas.results import MAX_POINTS
from ablate.backend.services.downsample import minmax_downsample, pyramid_levels
from ablate.backend.services.errors import Conflict, FieldError, ValidationProblem

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


# A table, its rows as tuples (run id first) and the names of the row's other fields.
_TableRows = tuple[Any, list[tuple[Any, ...]], tuple[str, ...]]


def write_rows(session: Session, rows: Sequence[tuple[int, Rows]]) -> None:
    """Insert the metric and series rows of already-inserted runs, in bulk (one statement per table;
    on PostgreSQL all of them in one round trip)."""
    tables = (
        (RunMetric.__table__, [(run_id, *m) for run_id, r in rows for m in r.metrics], MetricRow._fields),
        (RunSeries.__table__, [(run_id, *s) for run_id, r in rows for s in r.series], SeriesRow._fields),
        (
            RunSeriesLevel.__table__,
            [(run_id, *lv) for run_id, r in rows for lv in r.levels],
            LevelRow._fields,
        ),
    )
    if session.get_bind().dialect.name == "postgresql":
        _write_pipelined(session, tables)
        return
    for table, values, fields in tables:
        if values:
            names = ("run_id", *fields)
            session.execute(insert(cast(Table, table)), [dict(zip(names, v, strict=True)) for v in values])


# The array type each column's values are sent as (its assignment to the column then checks lengths
# and ranges as a plain INSERT does: an explicit cast to varchar(n) would truncate instead).
_ARRAY_OF = {int: "int8[]", float: "float8[]", str: "text[]", bytes: "bytea[]"}


def _write_pipelined(session: Session, tables: Sequence[_TableRows]) -> None:
    """Each table's rows as one ``INSERT ... SELECT FROM unnest(...)`` of one array a column, all in one
    pipeline (see :func:`pipelined`). The statement's text is the same whatever the number of rows, so
    psycopg converts it once (a multi-row ``VALUES`` of a ``%s`` a value was parsed again for every
    request, ~2 ms for ten results), and the arrays go in binary. Never prepared: a prepared statement
    makes psycopg send ``DEALLOCATE ALL`` after the next rollback on the connection (a read session's
    end), one more round trip for the next request."""
    raw = _driver_connection(session)
    with pipelined(session), raw.cursor() as cursor:
        for table, values, fields in tables:
            if not values:
                continue
            names = ("run_id", *fields)
            columns = ", ".join(f'"{c}"' for c in names)
            arrays = ", ".join(f"%b::{_ARRAY_OF[table.c[c].type.python_type]}" for c in names)
            sql = f"INSERT INTO {table.name} ({columns}) SELECT * FROM unnest({arrays})"
            cursor.execute(sql, [list(column) for column in zip(*values, strict=True)], prepare=False)


def _driver_connection(session: Session) -> psycopg.Connection[Any]:
    raw = session.connection().connection.driver_connection
    if not isinstance(raw, psycopg.Connection):
        raise TypeError(f"expected a psycopg connection, got {type(raw).__name__}")
    return raw


@contextmanager
def pipelined(session: Session) -> Iterator[None]:
    """On PostgreSQL, the statements issued inside reach the server together, in one round trip
    (psycopg's pipeline mode; a request's latency on a busy host is mostly round trips), and their
    errors come out of the block's end as SQLAlchemy's. Only statements whose results are not read
    belong inside (no ``RETURNING``, no ``SELECT``). Elsewhere, and inside another, it does nothing."""
    if session.get_bind().dialect.name != "postgresql":
        yield
        return
    raw = _driver_connection(session)
    if raw.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF:
        yield
        return
    try:
        with raw.pipeline():
            yield
    except psycopg.Error as exc:  # as SQLAlchemy raises it, for the callers' retry decisions
        raise DBAPIError.instance("(pipelined statements)", None, exc, psycopg.Error) from exc


def commit_in_pipeline(session: Session) -> None:
    """Inside :func:`pipelined` on PostgreSQL, end the transaction with the statements queued before it:
    its ``COMMIT`` goes in their round trip rather than one of its own (psycopg's ``commit()`` would
    wait for it; a plain statement does not). The caller's later commit finds nothing open and sends
    nothing. Everything must be flushed before (a statement after it would open a new transaction);
    a failure in the pipeline skips the ``COMMIT`` and comes out of the block's end. Elsewhere it does
    nothing: the caller's transaction commits as usual."""
    if session.get_bind().dialect.name != "postgresql":
        return
    if session.new or session.dirty or session.deleted:
        raise RuntimeError("commit_in_pipeline: the session has unflushed changes")
    raw = _driver_connection(session)
    if raw.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF:
        raise RuntimeError("commit_in_pipeline: only inside pipelined()")
    with raw.cursor() as cursor:
        cursor.execute("COMMIT", prepare=False)


def check_times(started_at: datetime | None, finished_at: datetime | None, loc: str) -> FieldError | None:
    if started_at and finished_at and finished_at < started_at:
        return FieldError(_join(loc, "finished_at"), "must not be before started_at")
    return None
