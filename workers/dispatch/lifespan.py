"""The in-process dispatcher of ``ablate serve`` (single-machine setup), started in the app's lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


@asynccontextmanager
async def dispatcher_lifespan(app: Any) -> AsyncIterator[None]:
    """Start a supervised dispatcher thread when ``app.state.run_dispatcher`` (it retries after
    database and Ray errors; ``/readyz`` reports its state); stop it (runs back to the queue) on
    shutdown. Started on the event loop's thread on purpose: ``ray.init`` installs signal handlers."""
    dispatcher = None
    if getattr(app.state, "run_dispatcher", False):
        from ablate.workers.dispatch.supervisor import SupervisedDispatcher

        dispatcher = SupervisedDispatcher(app.state.settings, app.state.database)
        dispatcher.start()
    app.state.dispatcher = dispatcher
    try:
        yield
    finally:
        if dispatcher is not None:
            dispatcher.stop()
