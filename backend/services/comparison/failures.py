"""Failures grouped by reason: one line for "30 runs: unplaceable ..." instead of the same reason in
every cell's line of the missing-data list."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ablate.backend.services.comparison.model import CellStatus, FailedRun

Reason = tuple[str, str | None, str | None]


def reason_of(run: FailedRun) -> Reason:
    return (run.status, run.failure_kind, run.error)


def describe_reason(reason: Reason) -> str:
    status, kind, error = reason
    return status + (f" ({kind})" if kind else "") + (f": {error}" if error else "")


def shared_reasons(cells: Sequence[CellStatus]) -> dict[Reason, list[FailedRun]]:
    """Reasons that runs of more than one cell share, with their runs (ordered by run id)."""
    cells_of: dict[Reason, set[int]] = {}
    runs_of: dict[Reason, list[FailedRun]] = {}
    for i, cell in enumerate(cells):
        for run in cell.not_succeeded:
            key = reason_of(run)
            cells_of.setdefault(key, set()).add(i)
            runs_of.setdefault(key, []).append(run)
    return {
        key: sorted(runs, key=lambda r: r.run_id) for key, runs in runs_of.items() if len(cells_of[key]) > 1
    }


def grouped_lines(shared: dict[Reason, list[FailedRun]], shown: int = 8) -> list[str]:
    """One line per shared reason, the most frequent first: count, reason, and the first run ids."""
    lines = []
    for key, runs in sorted(shared.items(), key=lambda kv: (-len(kv[1]), kv[1][0].run_id)):
        ids = ", ".join(str(r.run_id) for r in runs[:shown]) + (", ..." if len(runs) > shown else "")
        lines.append(f"{len(runs)} runs {describe_reason(key)} (runs {ids})")
    return lines


def why_no_headline(cells: Sequence[CellStatus], base: str | None) -> str:
    """Why a release has no speed-up to show, in the words of its runs."""
    succeeded = sum(c.succeeded for c in cells)
    pending = sum(c.pending for c in cells)
    runs = succeeded + pending + sum(c.failed + c.cancelled for c in cells)
    if runs == 0:
        return "No runs yet: submit a study (ablate study submit PLAN) or CI results."
    if succeeded == 0:
        if pending:
            return f"No result yet: {pending} of {runs} runs queued or running."
        reasons = Counter(reason_of(r) for c in cells for r in c.not_succeeded)
        (top, n), *_ = reasons.most_common(1)
        return f"None of its {runs} runs succeeded; {n} {describe_reason(top)}."
    if base and not any(c.succeeded for c in cells if c.variant == base):
        return f"No speed-up yet: no succeeded {base} runs ({succeeded} runs of other rungs succeeded)."
    return "No speed-up yet: needs succeeded runs of Base and at least one other variant."
