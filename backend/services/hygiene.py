"""Fixing bad data, with an audit trail: exclude or re-include a run, delete a study or a release.

An excluded run keeps its row (lists and its page show it, struck through with the reason); the
analysis queries (services/comparison/loading.py) leave it out. A deletion removes a study or a
release with everything in it, child rows first, in the caller's one transaction, and refuses while
any of its runs is queued or running (the dispatcher would write to rows that no longer exist).

Every action writes an ``audit_events`` row. That table has no foreign keys, so the record of a
deleted study or release outlives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import CursorResult, Delete, Select, delete, select
from sqlalchemy.orm import Session

from ablate.backend.db.base import utcnow
from ablate.backend.db.models import (
    AuditAction,
    AuditEvent,
    Release,
    Run,
    RunMetric,
    RunSeries,
    RunSeriesLevel,
    RunStatus,
    Study,
)
from ablate.backend.services import catalog, ingest, runs
from ablate.backend.services.errors import Conflict
from ablate.backend.services.studies import get_study
from ablate.backend.services.tokens import Principal
from ablate.backend.services.webhooks import watch

MAX_PAGE = runs.MAX_PAGE  # paged like the run list (runs.NewestFirst)
MAX_LISTED_IDS = 1_000  # run ids kept in a deletion's audit details
_ACTIVE = (RunStatus.queued.value, RunStatus.running.value)


@dataclass(frozen=True)
class AuditSubject:
    """What an audit event is about: a run, a study or a release (as many of them as apply)."""

    run_id: int | None = None
    study_id: int | None = None
    release: str | None = None


def _record(
    session: Session,
    who: Principal,
    action: AuditAction,
    subject: AuditSubject,
    *,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    event = AuditEvent(
        actor=who.name,
        actor_token_id=who.token_id,
        action=action.value,
        run_id=subject.run_id,
        study_id=subject.study_id,
        release=subject.release,
        reason=reason,
        details=details or {},
    )
    session.add(event)
    session.flush()
    return event


def _record_run(
    session: Session,
    who: Principal,
    action: AuditAction,
    run: Run,
    reason: str | None,
    details: dict[str, Any],
) -> AuditEvent:
    return _record(
        session,
        who,
        action,
        AuditSubject(run_id=run.id, study_id=run.study_id, release=run.release.ref),
        reason=reason,
        details=details,
    )


def _cell(run: Run) -> dict[str, Any]:
    return {
        "cluster": run.cluster.name,
        "workload": run.workload.name,
        "variant": run.variant.name,
        "repeat": run.repeat,
        "status": run.status,
    }


def exclude_run(session: Session, run_id: int, reason: str, who: Principal) -> tuple[Run, AuditEvent]:
    """Leave a finished run out of every analysis. 409 when it is already excluded or not finished."""
    run = runs.get_run(session, run_id)
    if run.status in _ACTIVE:
        raise Conflict.at("run_id", f"run {run_id} is {run.status}: only a finished run can be excluded")
    if run.excluded_at is not None:
        raise Conflict.at(
            "run_id", f"run {run_id} is already excluded ({run.exclusion_reason}); include it first"
        )
    run.excluded_at = utcnow()
    run.exclusion_reason = reason
    watch.mark_releases(session, [run.release_id])  # its verdicts may change: webhooks hear of it
    return run, _record_run(session, who, AuditAction.exclude_run, run, reason, _cell(run))


def include_run(session: Session, run_id: int, reason: str | None, who: Principal) -> tuple[Run, AuditEvent]:
    """Put an excluded run back into the analyses. 409 when it is not excluded."""
    run = runs.get_run(session, run_id)
    if run.excluded_at is None:
        raise Conflict.at("run_id", f"run {run_id} is not excluded")
    details = {**_cell(run), "excluded_at": run.excluded_at.isoformat(), "excluded_for": run.exclusion_reason}
    run.excluded_at = None
    run.exclusion_reason = None
    watch.mark_releases(session, [run.release_id])
    return run, _record_run(session, who, AuditAction.include_run, run, reason, details)


def _refuse_active(session: Session, where: Any, what: str) -> None:
    # FOR UPDATE (PostgreSQL): the dispatcher cannot claim a queued run between this check and the delete.
    active = session.execute(
        select(Run.id, Run.status).where(where, Run.status.in_(_ACTIVE)).order_by(Run.id).with_for_update()
    ).all()
    if active:
        shown = ", ".join(f"run {rid} ({status})" for rid, status in active[:20])
        more = f" and {len(active) - 20} more" if len(active) > 20 else ""
        raise Conflict(f"{what} still has queued or running runs: {shown}{more}; cancel them first")


def _delete_runs(session: Session, run_ids: Select[Any]) -> dict[str, int]:
    """Delete runs and their rows, children first (no reliance on either database's cascade)."""
    counts: dict[str, int] = {}
    for name, model in (
        ("run_series_levels", RunSeriesLevel),
        ("run_series", RunSeries),
        ("run_metrics", RunMetric),
    ):
        counts[name] = _deleted(session, delete(model).where(model.run_id.in_(run_ids)))
    return counts


def _deleted(session: Session, statement: Delete) -> int:
    result = session.execute(statement)
    assert isinstance(result, CursorResult)  # a DML statement's result, which has the row count
    return result.rowcount


def _run_ids(session: Session, where: Any) -> list[int]:
    return list(session.scalars(select(Run.id).where(where).order_by(Run.id)))


def _listed(ids: list[int]) -> dict[str, Any]:
    return {"run_ids": ids[:MAX_LISTED_IDS], "run_ids_truncated": len(ids) > MAX_LISTED_IDS}


def delete_study(session: Session, study_id: int, who: Principal) -> tuple[dict[str, int], AuditEvent]:
    """Delete a study, its runs and everything recorded for them; answer the counts per kind."""
    study = get_study(session, study_id)
    where = Run.study_id == study.id
    _refuse_active(session, where, f"study {study_id}")
    ids = _run_ids(session, where)
    counts = _delete_runs(session, select(Run.id).where(where))
    counts["runs"] = _deleted(session, delete(Run).where(where))
    ref, name = study.release.ref, study.name
    counts["studies"] = _deleted(session, delete(Study).where(Study.id == study.id))
    counts = _ordered(counts)
    event = _record(
        session,
        who,
        AuditAction.delete_study,
        AuditSubject(study_id=study_id, release=ref),
        details={"study": name, "deleted": counts, **_listed(ids)},
    )
    session.expunge(study)
    return counts, event


def delete_release(session: Session, ref: str, who: Principal) -> tuple[dict[str, int], AuditEvent]:
    """Delete a release with its studies, runs and everything recorded for them."""
    release = catalog.get_release(session, ref, "ref")
    where = Run.release_id == release.id
    _refuse_active(session, where, f"release {release.ref}")
    ids = _run_ids(session, where)
    counts = _delete_runs(session, select(Run.id).where(where))
    counts["runs"] = _deleted(session, delete(Run).where(where))
    counts["studies"] = _deleted(session, delete(Study).where(Study.release_id == release.id))
    counts["releases"] = _deleted(session, delete(Release).where(Release.id == release.id))
    counts = _ordered(counts)
    release_ref, release_id = release.ref, release.id
    session.expunge(release)
    runs.forget_release(session, release_ref, release_id)
    ingest.catalog_ids(session.get_bind().engine).forget_release(release_ref)
    event = _record(
        session,
        who,
        AuditAction.delete_release,
        AuditSubject(release=release_ref),
        details={"deleted": counts, **_listed(ids)},
    )
    return counts, event


def _ordered(counts: dict[str, int]) -> dict[str, int]:
    order = ("releases", "studies", "runs", "run_metrics", "run_series", "run_series_levels")
    return {k: counts[k] for k in order if k in counts}


def list_audit(
    session: Session,
    *,
    run_id: int | None = None,
    release: str | None = None,
    study_id: int | None = None,
    action: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> tuple[list[AuditEvent], str | None]:
    """Audit events, newest first, filtered; keyset paging on the id like the run list."""
    query = select(AuditEvent)
    if run_id is not None:
        query = query.where(AuditEvent.run_id == run_id)
    if release:
        catalog.parse_release_ref(release, "release")  # a malformed ref is a 422, not an empty page
        query = query.where(AuditEvent.release == release)
    if study_id is not None:
        query = query.where(AuditEvent.study_id == study_id)
    if action:
        query = query.where(AuditEvent.action == action)
    page = runs.NewestFirst(AuditEvent.id, cursor, limit)
    events, next_cursor = page.cut(session.scalars(page.query(query)).all(), lambda event: event.id)
    return list(events), next_cursor
