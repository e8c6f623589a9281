"""Markdown report: GitHub-flavoured tables ready to paste into release notes."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from ablate.backend.reports import tables as t
from ablate.backend.reports.checkpointing import advisor_tables
from ablate.backend.services.advice import ReleaseAdvice
from ablate.backend.services.comparison import ReleaseComparison

# Markdown (and the HTML it allows) in a name would render: a link, bold text, a tag. CommonMark
# lets any ASCII punctuation be backslash-escaped, so these are shown as written. An underscore
# inside a word (compiler_opt) cannot emphasise anything and is left as it is.
_MARKUP = re.compile(r"[\\`*\[\]<>|~!#]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def escape_md(text: str) -> str:
    # A newline would end the table row.
    return _MARKUP.sub(lambda m: "\\" + m.group(0), text).replace("\n", " ").strip() or " "


def table_md(table: t.Table, *, level: int = 2) -> str:
    lines = [f"{'#' * level} {escape_md(table.title)}", ""]
    if table.note:
        lines += [f"_{escape_md(table.note)}_", ""]
    if not table.rows:
        return "\n".join([*lines, "None.", ""])
    lines.append("| " + " | ".join(escape_md(h) for h in table.header) + " |")
    lines.append("|" + "|".join("---" for _ in table.header) + "|")
    lines += ["| " + " | ".join(escape_md(c) for c in row) + " |" for row in table.rows]
    return "\n".join([*lines, ""])


def _bullets(title: str, items: tuple[str, ...] | list[str]) -> str:
    body = "\n".join(f"- {escape_md(i)}" for i in items) if items else "None."
    return f"## {title}\n\n{body}\n"


def adaptive_lines(studies: tuple[dict[str, Any], ...]) -> list[str]:
    """Per adaptive study its headline, then one line per comparison (services/adaptive.py)."""
    lines: list[str] = []
    for study in studies:
        lines.append(f"study {study['study']} ({study['name']}): {study['headline']}")
        lines += [f"study {study['study']}: {c['text']}" for c in study["comparisons"]]
    return lines


def render_markdown(
    c: ReleaseComparison, *, generated_at: datetime | None = None, advice: ReleaseAdvice | None = None
) -> str:
    parts = [f"# Ablation report: {escape_md(c.release.ref)}", ""]
    if generated_at is not None:
        parts += [f"_Generated {generated_at.isoformat()}_", ""]
    parts.append(table_md(t.overview(c)))
    if c.environment:  # every rung moved alike: read before the verdicts
        parts.append(_bullets("The environment may have moved", c.environment))
    parts.append(_bullets("What is missing", c.missing))
    if c.adaptive:  # repeats {min, max}: where each comparison stopped, and the runs saved
        parts.append(_bullets("Adaptive repeats", adaptive_lines(c.adaptive)))
    parts.append(table_md(t.regression_table(c)))
    if c.not_testable:
        parts.append(table_md(t.not_testable_table(c)))
    parts += [table_md(x) for x in t.ablation_tables(c)]
    factorial = t.factorial_tables(c)
    if factorial:
        parts += ["## Factorial effects", ""]
        parts += [table_md(x, level=3) for x in factorial]
    parts += [table_md(x, level=2 if i == 0 else 3) for i, x in enumerate(advisor_tables(advice))]
    parts += [table_md(x) for x in t.delta_tables(c)]
    parts.append(table_md(t.manifest_table(c)))
    parts.append(_bullets("Known issues (release notes)", c.release.known_issues))
    parts.append(table_md(t.environment_table(c)))
    parts.append(table_md(t.method_table(c)))
    return "\n".join(parts).rstrip("\n") + "\n"
