"""The release page's "changes": the latest exclusions, re-inclusions and deletions in the release."""

from __future__ import annotations

from sqlalchemy.orm import Session

from ablate.backend.db.models import AuditEvent
from ablate.backend.services import hygiene

MAX_CHANGES = 20  # the rest is one click away: GET /api/v1/audit?release=...


def release_changes(session: Session, ref: str) -> list[AuditEvent]:
    events, _cursor = hygiene.list_audit(session, release=ref, limit=MAX_CHANGES)
    return events
