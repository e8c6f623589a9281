"""Exclusions, deletions and the audit trail, as the API takes and shows them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, StringConstraints

from ablate.backend.schemas.common import Line, Out, Strict

MAX_REASON = 1_000


# Why a run is excluded or re-included: one line (it is shown in lists, struck-through rows and
# the audit), surrounding spaces dropped, never empty.
def _not_blank(value: str) -> str:
    value = value.strip()
    if not value:
        raise ValueError("must not be empty or blank: say why")
    return value


Reason = Annotated[Line, StringConstraints(max_length=MAX_REASON), AfterValidator(_not_blank)]


class ExcludeRequest(Strict):
    reason: Reason


class IncludeRequest(Strict):
    reason: Reason | None = None


class AuditOut(Out):
    id: int
    created_at: datetime
    actor: str
    action: str
    run_id: int | None
    study_id: int | None
    release: str | None
    reason: str | None
    details: dict[str, Any]


class AuditPage(Out):
    items: list[AuditOut]
    next_cursor: str | None


class ExclusionOut(Out):
    run_id: int
    excluded: bool
    excluded_at: datetime | None
    exclusion_reason: str | None
    audit: AuditOut


class DeletedOut(Out):
    """What a deletion removed: row counts per kind, and the audit record that keeps it."""

    deleted: dict[str, int]
    audit: AuditOut
