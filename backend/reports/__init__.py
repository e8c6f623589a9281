"""Report export of a release comparison: self-contained HTML, Markdown, CSV and JSON.

Every renderer is a pure function of a :class:`~ablate.backend.services.comparison.ReleaseComparison`:
the same data gives byte-identical output. A timestamp appears only when the caller passes one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ablate.backend.services.comparison import ReleaseComparison

FORMATS: tuple[str, ...] = ("html", "md", "csv", "json")
MEDIA_TYPES: dict[str, str] = {
    "html": "text/html; charset=utf-8",
    "md": "text/markdown; charset=utf-8",
    "csv": "text/csv; charset=utf-8",
    "json": "application/json",
}
EXTENSIONS: dict[str, str] = {"html": "html", "md": "md", "csv": "csv", "json": "json"}


def render(
    comparison: ReleaseComparison,
    fmt: str,
    *,
    generated_at: datetime | None = None,
    advice: Any = None,
    history: Any = None,
) -> str:
    """The report in ``fmt`` (one of :data:`FORMATS`) as text. ``advice`` (a
    :class:`~ablate.backend.services.advice.ReleaseAdvice`) adds the checkpointing section to HTML
    and Markdown; ``history`` (a :class:`~ablate.backend.services.history.ReleaseHistories`) the
    history section to HTML."""
    if fmt == "html":
        from ablate.backend.reports.html import render_html

        return render_html(comparison, generated_at=generated_at, advice=advice, history=history)
    if fmt == "md":
        from ablate.backend.reports.markdown import render_markdown

        return render_markdown(comparison, generated_at=generated_at, advice=advice)
    if fmt == "csv":
        from ablate.backend.reports.csv import render_csv

        return render_csv(comparison)
    if fmt == "json":
        from ablate.backend.reports.json import render_json

        return render_json(comparison, generated_at=generated_at)
    raise ValueError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")


def default_filename(comparison: ReleaseComparison, fmt: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in comparison.release.ref)
    return f"{safe}-report.{EXTENSIONS[fmt]}"
