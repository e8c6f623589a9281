"""CI batches (``POST /api/v1/results``): :func:`submit_results` stores one run per result, exactly once
per idempotency key; :func:`submit_results_retrying` runs it in its own transaction.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Table, func, insert, select, text
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from ablate.backend.db.database import Database
from ablate.backend.db.models import (
    Run,
    RunSource,
)
from ablate.backend.domain.runner import RunResult
from ablate.backend.schemas.results import MAX_REPEAT, MetricValue, ResultIn, ResultsBatch
from ablate.backend.services.errors import Conflict, FieldError, ProblemError, ValidationProblem
from ablate.backend.services.ingest.catalog_ids import _CatalogLookup, catalog_ids
from ablate.backend.services.ingest.record import apply_result, write_results
from ablate.backend.services.ingest.rows import (
    Rows,
    check_directions,
    check_times,
    prepare_rows,
)


@dataclass(frozen=True)
class SubmitOutcome:
    run_ids: list[int]
    created: bool


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
        if bad := check_times(submitted.started_at, submitted.finished_at, loc):
            errors.append(bad)
    if errors:
        raise ValidationProblem(
            f"{len(errors)} invalid value(s); first: {errors[0].loc}: {errors[0].msg}", errors
        )
    return rows


def submit_results(
    session: Session,
    batch: ResultsBatch,
    *,
    token_scope: str | None,
    idempotency_key: str | None,
    optimistic: bool = False,
    commit: bool = False,
) -> SubmitOutcome:
    """Store a CI batch as one run per result, or return the runs a first identical submission created.

    ``optimistic`` is the happy path in the fewest statements: it does not look for the keys' runs
    first (the unique index on ``runs.idempotency_key`` refuses a repeat) and takes catalog ids from
    this process's cache. A repeat, a stale cached id or a concurrent winner then fails with an
    :class:`IntegrityError`, after which the caller asks again without ``optimistic``.

    ``commit``: the batch's rows end the caller's transaction, its ``COMMIT`` sent with them (one
    round trip fewer on PostgreSQL, :func:`~.rows.commit_in_pipeline`); the caller writes nothing after.
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
        apply_result(run, result, rows[i], submitted.started_at, submitted.finished_at)
        runs[i] = run
    _number_repeats(session, [(i, runs[i], s.repeat) for i, s, _ in todo], check=not optimistic)
    _insert_runs(session, list(runs.values()))
    write_results(session, [(runs[i], rows[i]) for i, _, _ in todo], commit=commit)
    ids = [runs[i].id if i in runs else existing[str(keys[i])] for i in range(len(keys))]
    return SubmitOutcome(ids, created=True)


def _insert_runs(session: Session, runs: Sequence[Run]) -> None:
    """One Core ``INSERT ... RETURNING`` for the new runs (the ORM's unit of work costs more CPU than
    the statement itself for rows this simple); the runs stay transient and get their ids from it."""
    session.flush()  # catalog entries this batch created go first: the runs' foreign keys need them
    table = cast(Table, Run.__table__)
    given = [{k: v for k, v in sa_inspect(run).dict.items() if k in table.c} for run in runs]
    # Every run was built by the same code, so the columns with defaults are set in all or none;
    # the others (a log path, a throughput) are nullable and NULL where a result has none.
    columns = set().union(*given)
    values = [{k: g.get(k) for k in columns} for g in given]
    returned = session.execute(insert(table).returning(table.c.id, sort_by_parameter_order=True), values)
    for run, (run_id,) in zip(runs, returned, strict=True):
        run.id = run_id


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


# What a caller may run first in the first transaction, giving the batch and the token's scope.
Prelude = Callable[[Session], tuple[ResultsBatch, str | None]]


def submit_results_retrying(
    database: Database,
    batch: ResultsBatch | None,
    *,
    token_scope: str | None,
    idempotency_key: str | None,
    attempts: int = 12,
    prelude: Prelude | None = None,
) -> SubmitOutcome:
    """:func:`submit_results` in its own transaction, tried again when a concurrent one got there first.

    The first try is optimistic (no idempotency look-up, cached catalog ids). If it fails on a
    constraint, or refuses a batch that carries idempotency keys (a repeat is answered by its first
    submission even when the repeat itself would be refused), the cache is dropped and the batch is
    tried the careful way: on the retry the winner's rows are visible, so the same key returns the
    winner's run ids: twenty clients sending the same batch at once store it exactly once.

    ``prelude`` (instead of ``batch`` and ``token_scope``) runs first in the first transaction and
    gives both: the results route checks the token and parses the body there, in the connection and
    transaction that store it. What it raises is raised as it is.
    """
    given: list[tuple[ResultsBatch, str | None]] = []
    try:
        with database.transaction() as session:
            given.append(prelude(session) if prelude is not None else (_required(batch), token_scope))
            return submit_results(
                session,
                given[0][0],
                token_scope=given[0][1],
                idempotency_key=idempotency_key,
                optimistic=True,
                commit=True,
            )
    except ProblemError:
        if not given or not any(k is not None for k in result_keys(given[0][0], idempotency_key)):
            raise
    except DBAPIError as exc:
        if not given or not _retryable(exc):
            raise
        catalog_ids(database.engine).clear()
    batch, token_scope = given[0]
    for attempt in range(attempts):
        try:
            with database.transaction() as session:
                return submit_results(
                    session, batch, token_scope=token_scope, idempotency_key=idempotency_key, commit=True
                )
        except DBAPIError as exc:
            if attempt == attempts - 1 or not _retryable(exc):
                raise
            # Jittered so the losers of one round do not collide again in step.
            time.sleep(random.uniform(0.005, 0.02) * (attempt + 1))
    raise AssertionError("unreachable")


def _required(batch: ResultsBatch | None) -> ResultsBatch:
    if batch is None:
        raise TypeError("submit_results_retrying needs a batch or a prelude")
    return batch
