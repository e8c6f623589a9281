"""Admin API for webhooks: create (the target checked; the secret never returned), list, delete, and
each webhook's delivery history."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response

from ablate.backend.api import auth
from ablate.backend.api.deps import database
from ablate.backend.schemas.common import DbId
from ablate.backend.schemas.webhooks import DeliveryOut, WebhookCreate, WebhookOut
from ablate.backend.services.tokens import Principal
from ablate.backend.services.webhooks import subscriptions

router = APIRouter(tags=["webhooks"])


@router.post("/webhooks", status_code=201, response_model=WebhookOut)
def create_webhook(body: WebhookCreate, request: Request, principal: Principal = Depends(auth.admin)) -> Any:
    settings = request.app.state.settings
    with database(request).transaction() as session:
        hook = subscriptions.create_webhook(
            session,
            url=body.url,
            secret=body.secret,
            events=list(body.events),
            description=body.description,
            created_by=principal.name if principal else None,
            allow_private=settings.webhook_allow_private,
        )
        return WebhookOut.model_validate(hook)


@router.get("/webhooks", response_model=list[WebhookOut], dependencies=[Depends(auth.admin)])
def list_webhooks(request: Request) -> Any:
    with database(request).read() as session:
        return [WebhookOut.model_validate(h) for h in subscriptions.list_webhooks(session)]


@router.get("/webhooks/{webhook_id}", response_model=WebhookOut, dependencies=[Depends(auth.admin)])
def get_webhook(webhook_id: DbId, request: Request) -> Any:
    with database(request).read() as session:
        return WebhookOut.model_validate(subscriptions.get_webhook(session, webhook_id))


@router.delete("/webhooks/{webhook_id}", status_code=204, dependencies=[Depends(auth.admin)])
def delete_webhook(webhook_id: DbId, request: Request) -> Response:
    with database(request).transaction() as session:
        subscriptions.delete_webhook(session, webhook_id)
    return Response(status_code=204)


@router.get(
    "/webhooks/{webhook_id}/deliveries",
    response_model=list[DeliveryOut],
    dependencies=[Depends(auth.admin)],
)
def list_deliveries(webhook_id: DbId, request: Request, limit: int = Query(100, ge=1, le=1000)) -> Any:
    """Newest first: each delivery's status, attempts (time, status code, error) and the body sent."""
    with database(request).read() as session:
        rows = subscriptions.deliveries(session, webhook_id, limit=limit)
        return [
            DeliveryOut.model_validate(
                {
                    **{c: getattr(d, c) for c in DeliveryOut.model_fields if c != "body"},
                    "body": json.loads(d.body),
                }
            )
            for d in rows
        ]
