"""JSON report: the comparison's ``to_json_dict()`` with a schema version, as canonical text."""

from __future__ import annotations

import json
from datetime import datetime

from backend.services.comparison import ReleaseComparison, RunSetComparison


def render_json(
    comparison: ReleaseComparison | RunSetComparison, *, generated_at: datetime | None = None
) -> str:
    body = comparison.to_json_dict()
    if generated_at is not None:
        body = {"generated_at": generated_at.isoformat(), **body}
    # Fixed indentation and field order (dataclass order) make equal data equal bytes.
    return json.dumps(body, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
