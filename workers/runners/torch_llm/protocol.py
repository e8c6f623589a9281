"""What the torch-llm child prints for its parent (kept torch-free so the parent can import it)."""

from __future__ import annotations

import json
from typing import Any

EVENT_PREFIX = "@@ablate-event "


def parse_event(line: str) -> dict[str, Any] | None:
    """The event on a child output line, or None for an ordinary log line."""
    if not line.startswith(EVENT_PREFIX):
        return None
    try:
        event = json.loads(line[len(EVENT_PREFIX) :])
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None
