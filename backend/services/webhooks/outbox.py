"""The outbox: an event becomes one ``webhook_deliveries`` row per subscribed webhook, written in the
caller's transaction, so the event exists exactly when the change that caused it is committed.

The body is rendered here, once: every attempt sends these bytes under this delivery id, so a
receiver can drop a repeat by ``X-Ablate-Delivery`` (delivery is at least once).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.config import get_settings
from ablate.backend.db.base import utcnow
from ablate.backend.db.models import DeliveryStatus, Webhook, WebhookDelivery, WebhookEvent

SIGNATURE_HEADER = "X-Ablate-Signature-256"
EVENT_HEADER = "X-Ablate-Event"
DELIVERY_HEADER = "X-Ablate-Delivery"


def sign(secret: str, body: bytes) -> str:
    """The signature header's value: ``sha256=`` and the hex HMAC-SHA256 of the body (as GitHub's)."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def link(path: str, **query: str) -> str:
    """``path`` (with ``query``) under ``ABLATE_PUBLIC_URL``, or the bare path when that is unset."""
    tail = f"{path}?{urlencode(query)}" if query else path
    base = get_settings().public_url.strip().rstrip("/")
    return f"{base}{tail}" if base else tail


def subscribers(session: Session, event: WebhookEvent) -> list[int]:
    """Ids of the webhooks subscribed to ``event`` (a handful of rows: filtered here, not in SQL,
    as JSON containment differs between the two databases)."""
    rows = session.execute(select(Webhook.id, Webhook.events).order_by(Webhook.id))
    return [hook_id for hook_id, events in rows if event.value in (events or [])]


def enqueue(
    session: Session, event: WebhookEvent, text: str, fields: dict[str, Any], *, now: datetime | None = None
) -> list[str]:
    """Write ``event`` to the outbox for each subscribed webhook; returns the delivery ids.

    The body: ``event``, ``delivery``, ``created_at``, a Slack-compatible ``text`` and ``fields``."""
    now = now or utcnow()
    ids: list[str] = []
    for hook_id in subscribers(session, event):
        delivery_id = str(uuid.uuid4())
        body = {
            "event": event.value,
            "delivery": delivery_id,
            "created_at": now.isoformat().replace("+00:00", "Z"),
            "text": text,
            **fields,
        }
        session.add(
            WebhookDelivery(
                delivery_id=delivery_id,
                webhook_id=hook_id,
                event=event.value,
                body=json.dumps(body, ensure_ascii=False, separators=(",", ":")),
                status=DeliveryStatus.pending.value,
                attempts=0,
                next_attempt_at=now,
                history=[],
                created_at=now,
            )
        )
        ids.append(delivery_id)
    return ids
