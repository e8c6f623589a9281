"""JSON report: the comparison's ``to_json_dict()`` with a schema version, as canonical text."""

from __future__ import annotations

from datetime import datetime

from ablate.backend.services.comparison import ReleaseComparison, RunSetComparison, json_text


def render_json(
    comparison: ReleaseComparison | RunSetComparison,
    *,
    generated_at: datetime | None = None,
    indent: int | None = 2,
) -> str:
    """Indented for the exported report (diffs line by line); ``indent=None`` is compact (what the API
    answers with). One encoder either way (:func:`~ablate.backend.services.comparison.json_text`)."""
    if generated_at is None and isinstance(comparison, ReleaseComparison):
        return comparison.json_text(indent)  # kept on the (immutable) comparison once made
    body = comparison.json_body()
    if generated_at is not None:
        body = {"generated_at": generated_at.isoformat(), **body}
    # One encoder, fixed indentation and field order (dataclass order): equal data gives equal bytes.
    return json_text(body, indent=indent)
