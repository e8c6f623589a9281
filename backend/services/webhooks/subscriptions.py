"""Admins' webhooks: create (the target checked), list, delete, and a webhook's delivery history."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.db.models import Webhook, WebhookDelivery, WebhookEvent
from ablate.backend.services.errors import NotFound, ValidationProblem
from ablate.backend.services.webhooks.targets import TargetRefused, check_target

EVENTS = tuple(e.value for e in WebhookEvent)


def create_webhook(
    session: Session,
    *,
    url: str,
    secret: str,
    events: list[str],
    description: str | None,
    created_by: str | None,
    allow_private: bool,
) -> Webhook:
    """A webhook for ``events`` (each once, sorted); an unknown event or a refused target is a 422
    naming the field, and nothing is written."""
    for i, event in enumerate(events):
        if event not in EVENTS:
            raise ValidationProblem.at(f"events[{i}]", f"unknown event {event!r}; one of {', '.join(EVENTS)}")
    if not events:
        raise ValidationProblem.at("events", f"name at least one event: {', '.join(EVENTS)}")
    try:
        check_target(url, allow_private=allow_private)
    except TargetRefused as exc:
        raise ValidationProblem.at("url", str(exc)) from None
    hook = Webhook(
        url=url,
        secret=secret,
        events=sorted(set(events)),
        description=description,
        created_by=created_by,
    )
    session.add(hook)
    session.flush()
    return hook


def list_webhooks(session: Session) -> list[Webhook]:
    return list(session.scalars(select(Webhook).order_by(Webhook.id)))


def get_webhook(session: Session, webhook_id: int) -> Webhook:
    hook = session.get(Webhook, webhook_id)
    if hook is None:
        raise NotFound.at("webhook_id", f"webhook {webhook_id} does not exist")
    return hook


def delete_webhook(session: Session, webhook_id: int) -> None:
    """Delete the webhook with its outbox rows: nothing more is sent to it."""
    session.delete(get_webhook(session, webhook_id))
    session.flush()


def deliveries(session: Session, webhook_id: int, *, limit: int = 100) -> list[WebhookDelivery]:
    """The webhook's deliveries, newest first."""
    get_webhook(session, webhook_id)
    return list(
        session.scalars(
            select(WebhookDelivery)
            .where(WebhookDelivery.webhook_id == webhook_id)
            .order_by(WebhookDelivery.id.desc())
            .limit(limit)
        )
    )
