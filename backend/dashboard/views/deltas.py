"""Release-over-release (or run set against run set) rows, shared by the release and compare pages."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ablate.backend.dashboard import links
from ablate.backend.domain.metrics import describe_metric
from ablate.backend.services.comparison import ReleaseDelta


@dataclass
class DeltaRow:
    cluster: str
    workload: str
    variant: str
    metric: str
    label: str
    unit: str
    status: str
    baseline_median: float | None
    contender_median: float | None
    n_baseline: int
    n_contender: int
    improvement: float | None  # oriented percent: > 0 is better whatever the metric
    improvement_low: float | None
    improvement_high: float | None
    p_value: float | None
    q_value: float | None  # Benjamini-Hochberg across the release; the verdict reads it
    test: str | None
    verdict: str | None
    significant: bool | None
    # Past the threshold, p < alpha, not confirmed by q: shown as "suspect", never as green.
    suspect: bool
    indicated: str | None  # the direction the medians point to, confirmed or not
    reasons: str
    lookback: str | None
    # The succeeded runs behind each number (ablate.backend.dashboard.links); None where no run list says it.
    baseline_runs_url: str | None = None
    contender_runs_url: str | None = None
    change_runs_url: str | None = None  # both sides: what the change and its test read
    history_url: str | None = None  # this cell across the family's releases (release sides only)
    busy_runs: int = 0  # runs of the cell measured on a busy host (left out of the verdict unless kept)
    busy_included: bool = False


@dataclass(frozen=True)
class Sides:
    """What the two columns of a delta table stand for, so each number links to its runs."""

    baseline: links.Scope
    contender: links.Scope

    def urls(self, d: ReleaseDelta) -> dict[str, str | None]:
        r = d.result
        cell = (d.cluster, d.workload, d.variant)
        old = links.cell_runs_url([self.baseline], *cell) if r and r.n_baseline else None
        new = links.cell_runs_url([self.contender], *cell) if r and r.n_contender else None
        both = links.cell_runs_url([self.baseline, self.contender], *cell) if old and new else None
        release = self.contender.release
        history = links.history_url(release, *cell, d.metric) if release and self.baseline.release else None
        return {
            "baseline_runs_url": old,
            "contender_runs_url": new,
            "change_runs_url": both,
            "history_url": history,
        }


def delta_row(d: ReleaseDelta, sides: Sides | None = None) -> DeltaRow:
    r = d.result
    mdef = describe_metric(d.metric, d.unit)
    look = None
    lb = d.lookback
    if lb is not None and lb.verdict is not None and lb.improvement_pct is not None:
        look = f"lookback: {lb.improvement_pct:+.1f}% vs last {lb.n_history} ({lb.verdict})"
    tr = d.trend
    if tr is not None and tr.verdict in ("improved", "regressed") and tr.slope_pct is not None:
        drift = f"drift: {tr.slope_pct:+.2f}% per release over {tr.n_releases} ({tr.verdict})"
        look = f"{look}; {drift}" if look else drift
    kb = d.k_back
    if kb is not None and kb.verdict in ("improved", "regressed") and kb.improvement_pct is not None:
        back = f"{d.lookback.n_history} back" if d.lookback is not None else "K back"
        far = f"vs {d.k_back_release} ({back}): {kb.improvement_pct:+.1f}% ({kb.verdict})"
        look = f"{look}; {far}" if look else far
    # A lookback that does not speak (too little history) says why in the row's reasons, not here.
    reasons = [*(r.reasons if r else ()), *(f"lookback: {x}" for x in (lb.reasons if lb else ()))]
    return DeltaRow(
        cluster=d.cluster,
        workload=d.workload,
        variant=d.variant,
        metric=d.metric,
        label=mdef.label,
        unit=mdef.unit,
        status=d.status,
        baseline_median=r.baseline_median if r else None,
        contender_median=r.contender_median if r else None,
        n_baseline=r.n_baseline if r else 0,
        n_contender=r.n_contender if r else 0,
        improvement=r.improvement_pct if r else None,
        improvement_low=r.improvement_ci_low if r else None,
        improvement_high=r.improvement_ci_high if r else None,
        p_value=r.p_value if r else None,
        q_value=r.q_value if r else None,
        test=r.test if r else None,
        verdict=r.verdict if r else None,
        significant=r.significant if r else None,
        suspect=d.suspect,
        busy_runs=d.busy_runs,
        busy_included=d.busy_included,
        indicated=r.indicated if r else None,
        reasons="; ".join(reasons),
        lookback=look,
        **(sides.urls(d) if sides else {}),
    )


def delta_rows(deltas: Iterable[ReleaseDelta], sides: Sides | None = None) -> list[DeltaRow]:
    # Regressions first, then suspects, so the rows that need attention are at the top.
    rows = [delta_row(d, sides) for d in deltas]
    rank = {"regressed": 0, "not testable": 2, "improved": 3, "unchanged": 4}
    return sorted(
        rows,
        key=lambda r: (
            1 if r.suspect else rank.get(r.verdict or "", 5),
            r.cluster,
            r.workload,
            r.variant,
            r.metric,
        ),
    )


def split_deltas(rows: list[DeltaRow]) -> tuple[list[DeltaRow], list[DeltaRow]]:
    """(rows with a verdict, a suspicion or no possible test, plain "unchanged" or uncompared rows): the
    second are folded. Not-testable rows stay in view: they are never folded in with "unchanged"."""
    shown = [r for r in rows if r.suspect or r.verdict in ("regressed", "improved", "not testable")]
    return shown, [r for r in rows if r not in shown]


def short_labels(old: str, new: str) -> tuple[str, str]:
    """Column titles: just the tags when both releases are of the same image (``25.09``, ``25.12``)."""
    old_image, _, old_tag = old.rpartition(":")
    new_image, _, new_tag = new.rpartition(":")
    if old_image and old_image == new_image:
        return old_tag, new_tag
    return old, new
