"""The API process's background threads, started and stopped with the app: the webhook worker
(unless ``ABLATE_WEBHOOKS=false``) and, for ``ablate serve``, the in-process dispatcher."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ablate.backend.services.webhooks.worker import WebhookWorker
from ablate.workers.dispatch.lifespan import dispatcher_lifespan


@asynccontextmanager
async def app_lifespan(app: Any) -> AsyncIterator[None]:
    worker = None
    if app.state.settings.webhooks:
        worker = WebhookWorker(app.state.settings, app.state.database)
        worker.start()
    app.state.webhooks = worker
    try:
        async with dispatcher_lifespan(app):
            yield
    finally:
        if worker is not None:
            worker.stop()
