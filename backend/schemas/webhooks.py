"""Webhooks over the admin API: the secret goes in, never out."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from ablate.backend.schemas.common import Line, Name, Out, Strict

Url = Annotated[Line, StringConstraints(min_length=1, max_length=2000)]
Secret = Annotated[Line, StringConstraints(min_length=8, max_length=500)]
EventName = Annotated[Line, StringConstraints(min_length=1, max_length=32)]


class WebhookCreate(Strict):
    url: Url
    secret: Secret = Field(description="Signs each body (X-Ablate-Signature-256); never returned.")
    events: list[EventName] = Field(
        min_length=1,
        max_length=10,
        description="release.regression, release.resolved, study.finished, study.failed",
    )
    description: Name | None = None


class WebhookOut(Out):
    id: int
    url: str
    events: list[str]
    description: str | None
    created_by: str | None
    created_at: datetime


class DeliveryAttempt(Out):
    attempt: int
    at: str
    status_code: int | None
    error: str | None
    duration_ms: int


class DeliveryOut(Out):
    id: int
    delivery_id: str
    webhook_id: int
    event: str
    status: str
    attempts: int
    next_attempt_at: datetime
    last_status_code: int | None
    last_error: str | None
    history: list[DeliveryAttempt]
    created_at: datetime
    delivered_at: datetime | None
    body: dict[str, Any]
