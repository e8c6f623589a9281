"""Data hygiene: exclude and re-include runs, delete studies and releases, read the audit trail."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from ablate.backend.api import auth
from ablate.backend.api.deps import database
from ablate.backend.api.paths import RELEASE_PATH
from ablate.backend.db.models import AuditEvent, Run
from ablate.backend.schemas.common import DbId, Line
from ablate.backend.schemas.hygiene import (
    AuditOut,
    AuditPage,
    DeletedOut,
    ExcludeRequest,
    ExclusionOut,
    IncludeRequest,
)
from ablate.backend.services import hygiene
from ablate.backend.services.tokens import Principal

router = APIRouter(tags=["hygiene"])


def _who(principal: Principal | None) -> Principal:
    assert principal is not None  # auth.admin never lets an anonymous request through
    return principal


def _exclusion(run: Run, event: AuditEvent) -> dict[str, Any]:
    return {
        "run_id": run.id,
        "excluded": run.excluded_at is not None,
        "excluded_at": run.excluded_at,
        "exclusion_reason": run.exclusion_reason,
        "audit": AuditOut.model_validate(event),
    }


@router.post("/runs/{run_id}/exclude", response_model=ExclusionOut)
def exclude_run(
    run_id: DbId, body: ExcludeRequest, request: Request, principal: Principal | None = Depends(auth.admin)
) -> Any:
    """Leave a finished run out of every analysis (it stays listed, with the reason).
    409 when it is already excluded or still queued or running."""
    with database(request).transaction() as session:
        return _exclusion(*hygiene.exclude_run(session, run_id, body.reason, _who(principal)))


@router.post("/runs/{run_id}/include", response_model=ExclusionOut)
def include_run(
    run_id: DbId,
    request: Request,
    body: IncludeRequest | None = None,
    principal: Principal | None = Depends(auth.admin),
) -> Any:
    """Put an excluded run back into the analyses; the reason is optional. 409 when not excluded."""
    reason = body.reason if body else None
    with database(request).transaction() as session:
        return _exclusion(*hygiene.include_run(session, run_id, reason, _who(principal)))


@router.delete("/studies/{study_id}", response_model=DeletedOut)
def delete_study(study_id: DbId, request: Request, principal: Principal | None = Depends(auth.admin)) -> Any:
    """Delete a study with its runs, metrics and series. 409 while any of its runs is queued or running."""
    with database(request).transaction() as session:
        counts, event = hygiene.delete_study(session, study_id, _who(principal))
        return {"deleted": counts, "audit": AuditOut.model_validate(event)}


@router.delete(RELEASE_PATH, response_model=DeletedOut)
def delete_release(ref: str, request: Request, principal: Principal | None = Depends(auth.admin)) -> Any:
    """Delete a release (``image:tag``) with its studies, runs, metrics and series.
    409 while any of its runs is queued or running."""
    with database(request).transaction() as session:
        counts, event = hygiene.delete_release(session, ref, _who(principal))
        return {"deleted": counts, "audit": AuditOut.model_validate(event)}


@router.get("/audit", response_model=AuditPage, dependencies=[Depends(auth.read)])
def list_audit(
    request: Request,
    run_id: DbId | None = None,
    release: Line | None = Query(
        None, max_length=265, description="Only events of this release (image:tag)."
    ),
    study_id: DbId | None = None,
    action: Literal["exclude_run", "include_run", "delete_study", "delete_release"] | None = None,
    cursor: Line | None = Query(None, max_length=200, description="next_cursor of the previous page"),
    limit: int = Query(50, ge=1, le=hygiene.MAX_PAGE),
) -> Any:
    """Exclusions, re-inclusions and deletions, newest first; ``next_cursor`` is null on the last page."""
    with database(request).read() as session:
        items, next_cursor = hygiene.list_audit(
            session,
            run_id=run_id,
            release=release,
            study_id=study_id,
            action=action,
            cursor=cursor,
            limit=limit,
        )
        return {"items": [AuditOut.model_validate(e) for e in items], "next_cursor": next_cursor}
