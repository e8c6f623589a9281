"""Delivering the outbox: claim due rows with a lease, POST each, record the attempt.

A claim is one ``UPDATE ... RETURNING`` over the due rows. On PostgreSQL the rows are picked in a CTE
with ``FOR UPDATE SKIP LOCKED``: workers of several API processes never take the same row nor wait
on each other. On SQLite the statement runs under the single writer lock, which makes it as atomic.
A claim counts the attempt and leases the row for ``webhook_lease_s``; a worker that dies while
delivering (a killed server) leaves the row pending, and once the lease has passed any worker sends
it again: the same body under the same ``X-Ablate-Delivery`` id. Recording is guarded by the lease
owner, so a worker whose lease was taken over writes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import and_, exists, or_, select, update
from sqlalchemy.orm import Session

from ablate.backend import __version__
from ablate.backend.config import Settings
from ablate.backend.db.base import picked_rows, utcnow
from ablate.backend.db.models import DeliveryStatus, Webhook, WebhookDelivery
from ablate.backend.services.webhooks.outbox import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, sign
from ablate.backend.services.webhooks.targets import TargetRefused, check_target

PENDING = DeliveryStatus.pending.value
MAX_ERROR = 500  # characters of an error or answer kept per attempt


@dataclass(frozen=True)
class Due:
    """A claimed delivery and where it goes."""

    id: int
    delivery_id: str
    event: str
    body: str
    attempt: int
    url: str
    secret: str


@dataclass(frozen=True)
class Outcome:
    status_code: int | None
    error: str | None
    duration_ms: int

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def _due(now: datetime) -> Any:
    return and_(
        WebhookDelivery.status == PENDING,
        WebhookDelivery.next_attempt_at <= now,
        or_(WebhookDelivery.lease_expires_at.is_(None), WebhookDelivery.lease_expires_at < now),
    )


def claim_due(
    session: Session, owner: str, *, limit: int, lease_s: float, now: datetime | None = None
) -> list[Due]:
    """Lease up to ``limit`` due deliveries (oldest due first) for ``owner``, counting the attempt."""
    now = now or utcnow()
    # A read first: an idle worker takes no write lock (SQLite has one for the whole database).
    if not session.scalar(select(exists().where(_due(now)))):
        return []
    pick = (
        select(WebhookDelivery.id)
        .where(_due(now))
        .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id)
        .limit(limit)
    )
    claimed = (
        session.execute(
            update(WebhookDelivery)
            .where(picked_rows(session, pick, WebhookDelivery.id), _due(now))
            .values(
                lease_owner=owner,
                lease_expires_at=now + timedelta(seconds=lease_s),
                attempts=WebhookDelivery.attempts + 1,
            )
            .returning(WebhookDelivery.id)
            .execution_options(synchronize_session=False)
        )
        .scalars()
        .all()
    )
    if not claimed:
        return []
    rows = session.execute(
        select(
            WebhookDelivery.id,
            WebhookDelivery.delivery_id,
            WebhookDelivery.event,
            WebhookDelivery.body,
            WebhookDelivery.attempts,
            Webhook.url,
            Webhook.secret,
        )
        .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
        .where(WebhookDelivery.id.in_(list(claimed)))
        .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id)
    ).all()
    return [Due(*row) for row in rows]


def headers_for(due: Due, body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": f"Ablate-Webhook/{__version__}",
        EVENT_HEADER: due.event,
        DELIVERY_HEADER: due.delivery_id,
        SIGNATURE_HEADER: sign(due.secret, body),
    }


def send(client: httpx.Client, due: Due, *, allow_private: bool) -> Outcome:
    """One attempt: the target checked again (a name may resolve elsewhere now), then one POST.
    Redirects are not followed (a redirect could lead to a private target)."""
    body = due.body.encode("utf-8")
    start = time.monotonic()

    def took() -> int:
        return round((time.monotonic() - start) * 1000)

    try:
        check_target(due.url, allow_private=allow_private)
    except TargetRefused as exc:
        return Outcome(None, str(exc)[:MAX_ERROR], took())
    try:
        response = client.post(due.url, content=body, headers=headers_for(due, body))
    except Exception as exc:  # any failure to send is this attempt's error, never the worker's end
        return Outcome(None, f"{type(exc).__name__}: {exc}"[:MAX_ERROR], took())
    if 200 <= response.status_code < 300:
        return Outcome(response.status_code, None, took())
    answer = response.text.strip().replace("\n", " ")[:200]
    return Outcome(response.status_code, f"HTTP {response.status_code}: {answer}".strip(), took())


def record(
    session: Session,
    owner: str,
    due: Due,
    outcome: Outcome,
    settings: Settings,
    *,
    now: datetime | None = None,
) -> str | None:
    """Store the attempt; returns the row's new status, or None when the lease is no longer ours."""
    now = now or utcnow()
    row = session.scalars(
        select(WebhookDelivery).where(
            WebhookDelivery.id == due.id,
            WebhookDelivery.lease_owner == owner,
            WebhookDelivery.status == PENDING,
        )
    ).one_or_none()
    if row is None:
        return None
    entry = {
        "attempt": due.attempt,
        "at": now.isoformat().replace("+00:00", "Z"),
        "status_code": outcome.status_code,
        "error": outcome.error,
        "duration_ms": outcome.duration_ms,
    }
    values: dict[str, Any] = {
        "history": [*(row.history or []), entry],
        "last_status_code": outcome.status_code,
        "last_error": outcome.error,
        "lease_owner": None,
        "lease_expires_at": None,
    }
    if outcome.ok:
        values.update(status=DeliveryStatus.delivered.value, delivered_at=now)
    elif due.attempt >= settings.webhook_max_attempts:
        values.update(status=DeliveryStatus.failed.value)
    else:
        values.update(next_attempt_at=now + timedelta(seconds=settings.webhook_backoff.delay_s(due.attempt)))
    done = session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == due.id, WebhookDelivery.lease_owner == owner)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return str(values.get("status", PENDING)) if getattr(done, "rowcount", 1) else None
