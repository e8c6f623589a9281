"""Finishing scheduled runs with their results (the Ray dispatcher's path): :func:`record_run_results`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, update
from sqlalchemy.orm import Session

from ablate.backend.db.base import among_ids
from ablate.backend.db.models import (
    Run,
    RunMetric,
    RunSeries,
    RunSeriesLevel,
    RunStatus,
)
from ablate.backend.domain.runner import RunResult
from ablate.backend.services.errors import FieldError, ValidationProblem
from ablate.backend.services.ingest.rows import (
    THROUGHPUT,
    Rows,
    check_directions,
    check_times,
    commit_in_pipeline,
    pipelined,
    prepare_rows,
    write_rows,
)
from ablate.backend.services.webhooks import watch


@dataclass
class HeldRun:
    """A run held for finishing as its holder read it (no ORM object): what recording reads of it, and
    ``extra`` columns to set with its result. A batch of them is written with one statement per
    changed set of columns, without the ORM's unit of work (the dispatcher's path)."""

    id: int
    status: str
    study_id: int | None
    release_id: int
    total_steps: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class FinishedRun:
    """One scheduled run to finish: the run (loaded, or as read by its holder; held by the caller), its
    result and when it ran."""

    run: Run | HeldRun
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
    if bad := check_times(item.started_at, item.finished_at, ""):
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
    held: list[dict[str, Any]] = []
    for item, r in zip(items, rows, strict=True):
        # A run cancelled meanwhile stays cancelled.
        status = RunStatus.cancelled.value if item.run.status == RunStatus.cancelled else None
        values = result_values(
            item.result, r, item.started_at, item.finished_at, status=status, total_steps=item.run.total_steps
        )
        if isinstance(item.run, HeldRun):
            held.append({**item.run.extra, **values, "b_id": item.run.id})
        else:
            for name, value in values.items():
                setattr(item.run, name, value)
    session.flush()  # runs with the same changed columns go out as one executemany UPDATE
    _update_held(session, held)
    ids = [item.run.id for item in items]
    if not ids:
        return set()
    # A retried attempt replaces what an earlier attempt left behind: deleted in the same round trip
    # as the inserts (on PostgreSQL; see :func:`pipelined`).
    with pipelined(session):
        for table in (RunMetric, RunSeries, RunSeriesLevel):
            gone = delete(table).where(among_ids(session, table.run_id, ids))
            session.execute(gone.execution_options(synchronize_session=False))
        write_results(session, [(item.run, r) for item, r in zip(items, rows, strict=True)])
    for item in items:
        if isinstance(item.run, Run):
            session.expire(item.run, ["metrics", "series"])
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


def apply_result(
    run: Run,
    result: RunResult,
    rows: Rows,
    started_at: datetime | None,
    finished_at: datetime | None,
    *,
    status: str | None = None,
) -> None:
    """Set a run's columns from its result (the error fields are cleared by a later success)."""
    values = result_values(result, rows, started_at, finished_at, status=status, total_steps=run.total_steps)
    for name, value in values.items():
        setattr(run, name, value)


def result_values(
    result: RunResult,
    rows: Rows,
    started_at: datetime | None,
    finished_at: datetime | None,
    *,
    status: str | None = None,
    total_steps: int | None = None,
) -> dict[str, Any]:
    """The columns a run gets from its result (see :func:`apply_result`); ``total_steps``: the run's."""
    values: dict[str, Any] = {
        "status": status or result.status,
        "error": _storable_text(result.error),
        "failure_kind": result.failure_kind,
        "provenance": dict(result.provenance),
        "environment": dict(result.environment),
    }
    for name, value in (
        ("log_tail", _storable_text(result.log_tail) or None),
        ("log_path", result.log_path),
        ("started_at", started_at),
        ("finished_at", finished_at),
    ):
        if value is not None:
            values[name] = value
    throughput = rows.metric(THROUGHPUT)
    if throughput is not None:
        values["latest_throughput"] = throughput
    if values["status"] == RunStatus.succeeded and total_steps is not None:
        values["current_step"] = total_steps
    return values


def _update_held(session: Session, values: list[dict[str, Any]]) -> None:
    """Write the columns of held runs (``b_id``: the run's id), one executemany UPDATE per set of
    columns (the runs are locked by their holder: no guard here, as for the ORM's flush)."""
    table = cast(Table, Run.__table__)
    by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for v in values:
        by_columns.setdefault(tuple(sorted(v)), []).append(v)
    for group in by_columns.values():
        session.execute(update(table).where(table.c.id == bindparam("b_id")), group)


def write_results(
    session: Session, results: Sequence[tuple[Run | HeldRun, Rows]], *, commit: bool = False
) -> None:
    """Insert the runs' metric and series rows (the runs already have their ids) and mark their
    releases changed for the webhooks, in one round trip; with ``commit`` the transaction's
    ``COMMIT`` goes in that round trip too (:func:`~.rows.commit_in_pipeline`)."""
    with pipelined(session):
        write_rows(session, [(run.id, rows) for run, rows in results])
        watch.mark_releases(session, {run.release_id for run, _ in results})
        if commit:
            commit_in_pipeline(session)
