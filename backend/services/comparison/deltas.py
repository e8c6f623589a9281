"""The release-over-release deltas of one release: every cell and metric against the baseline release,
the lookback and the drift over the lookback releases, and the workloads whose rungs all moved alike.

The checks of a release run as one batch each, so each Benjamini-Hochberg adjustment covers the whole
release; the between-session variance of every cluster and metric is estimated once per build.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

from ablate.backend.analysis.environment import common_shifts
from ablate.backend.analysis.regression import LookbackRequest, ReleasePair
from ablate.backend.analysis.session import (
    MIN_DIFFERENCES,
    RERUN_METHOD,
    SessionVariance,
    rerun_variances,
    session_variances,
)
from ablate.backend.db.models import Release
from ablate.backend.domain.metrics import describe_metric
from ablate.backend.services.comparison.loading import Catalog, Cell
from ablate.backend.services.comparison.model import ComparisonOptions, HistoryPoint, ReleaseDelta

ValuesByRelease = Mapping[int, Mapping[Cell, Mapping[str, list[float]]]]
Sessions = dict[tuple[str, str], SessionVariance]  # (cluster, metric) -> its between-session variance


@dataclass(frozen=True)
class DeltaInputs:
    """What the deltas of one release read: its values and those of its baseline and lookback releases."""

    by_release: ValuesByRelease
    cat: Catalog
    release: Release
    baseline: Release | None
    history: Sequence[Release]
    metrics: Sequence[str]
    units: Mapping[str, str]
    directions: Mapping[str, str]  # custom metric -> stored direction
    opts: ComparisonOptions
    busy_cells: Mapping[Cell, int] = field(default_factory=dict)  # busy-host runs per cell
    same_session: bool = False  # the baseline's runs were re-run beside this release's
    # then the baseline's own earlier session, per cell, where the re-run ran the same images
    reruns: Mapping[Cell, Mapping[str, list[float]]] = field(default_factory=dict)

    def unit(self, metric: str) -> str:
        return self.units.get(metric) or describe_metric(metric).unit

    @cached_property
    def lookback_values(self) -> list[tuple[str, Mapping[Cell, Mapping[str, list[float]]]]]:
        """(ref, values) of each lookback release, oldest first (refs read once, not per cell)."""
        return [(r.ref, self.by_release.get(r.id, {})) for r in self.history]

    @cached_property
    def lookback_by_ref(self) -> dict[str, Mapping[Cell, Mapping[str, list[float]]]]:
        """The values of each lookback release by its ref (made once, not per cell)."""
        return dict(self.lookback_values)

    def ordered_cells(self) -> list[Cell]:
        """The cells of the release and its baseline, by cluster, workload and ladder order."""
        values = self.by_release.get(self.release.id, {})
        old = self.by_release.get(self.baseline.id, {}) if self.baseline else {}
        rank = {v.name: self.cat.variant_key(v) for v in self.cat.variants.values()}
        return sorted(set(values) | set(old), key=lambda c: (c[0], c[1], rank.get(c[2], (0, 0, c[2]))))


class _DeltaRow(NamedTuple):
    """One cell and metric of the release deltas before the batched tests fill it in."""

    cell: Cell
    metric: str
    unit: str
    status: str
    pair: int | None  # index into the release-over-release checks; None when not compared
    look: int | None  # index into the lookback checks
    history: tuple[HistoryPoint, ...]
    back: int | None = None  # index into the checks against the release K back
    back_release: str | None = None


@dataclass
class _Batch:
    """The checks of one release, gathered cell by cell, run once each at the end."""

    rows: list[_DeltaRow] = field(default_factory=list)
    pairs: list[ReleasePair] = field(default_factory=list)
    looks: list[LookbackRequest] = field(default_factory=list)
    backs: list[ReleasePair] = field(default_factory=list)  # against the oldest of the lookback window
    notes: list[str] = field(default_factory=list)
    no_baseline_data: int = 0


def release_deltas(inp: DeltaInputs, sessions: Sessions) -> tuple[tuple[ReleaseDelta, ...], list[str]]:
    """(the deltas, notes on what is missing); ``sessions``: :func:`session_levels` of ``inp``."""
    batch = _Batch()
    for cell in inp.ordered_cells():
        for metric in inp.metrics:
            _gather(inp, sessions, batch, cell, metric)
    notes = batch.notes + _unknown_session_notes(inp, sessions, batch.rows)
    if inp.baseline is not None and batch.no_baseline_data:
        notes.append(
            f"{batch.no_baseline_data} cell/metric pairs have no succeeded runs in {inp.baseline.ref}"
        )
    opts = inp.opts
    results = opts.compare(batch.pairs)
    lookbacks = opts.lookbacks(batch.looks)
    trends = opts.trends(batch.looks)
    far_results = opts.compare(batch.backs)  # their own Benjamini-Hochberg family, as the lookbacks
    deltas = tuple(
        ReleaseDelta(
            *r.cell,
            r.metric,
            r.unit,
            r.status,
            None if r.pair is None else results[r.pair],
            None if r.look is None else lookbacks[r.look],
            r.history,
            busy_runs=inp.busy_cells.get(r.cell, 0),
            busy_included=opts.busy_hosts,
            trend=None if r.look is None else trends[r.look],
            k_back=None if r.back is None else far_results[r.back],
            k_back_release=r.back_release,
        )
        for r in batch.rows
    )
    return deltas, notes


def _gather(inp: DeltaInputs, sessions: Sessions, batch: _Batch, cell: Cell, metric: str) -> None:
    """The row of one cell and metric, and the checks it needs, added to ``batch``."""
    values = inp.by_release.get(inp.release.id, {})
    base_values = inp.by_release.get(inp.baseline.id, {}) if inp.baseline else {}
    unit, better = inp.unit(metric), inp.directions.get(metric)
    new = tuple(sorted(values.get(cell, {}).get(metric, ())))
    old = tuple(sorted(base_values.get(cell, {}).get(metric, ())))
    points = tuple(
        HistoryPoint(ref, len(v), _median(sorted(v)))
        for ref, hv in inp.lookback_values
        if (v := hv.get(cell, {}).get(metric))
    )
    pair: int | None = None
    look: int | None = None
    pool = f"{cell[0]}/{cell[1]}"  # a cluster and workload's rungs share a moderated variance
    if inp.baseline is None:
        status = "no baseline release"
    elif not new:
        if cell not in values:
            batch.notes.append(
                f"{cell[2]} on {cell[1]} ({cell[0]}): in {inp.baseline.ref} but not in this release"
            )
        status = "no data in this release"
    elif not old:
        status = "no baseline data"
        batch.no_baseline_data += 1
    else:
        status = "compared"
        pair = len(batch.pairs)
        var, df, note = session_term(sessions.get((cell[0], metric)), cell[0], inp.same_session)
        batch.pairs.append(ReleasePair(old, new, metric, unit, better, var, df, note, pool))
    if new and points:
        look = len(batch.looks)
        median = _median(new)
        batch.looks.append(LookbackRequest(median, [p.median for p in points], metric, unit, better))
    back = back_ref = None
    opts = inp.opts
    window = points[-opts.lookback :] if opts.lookback > 0 else ()
    # A drift too slow for one step shows K releases back (with the lookback's minimum history).
    if new and len(window) >= max(2, opts.lookback_min_history):
        back_ref = window[0].release
        far = tuple(sorted(inp.lookback_by_ref[back_ref][cell][metric]))
        var, df, note = session_term(sessions.get((cell[0], metric)), cell[0], False)
        back = len(batch.backs)
        batch.backs.append(ReleasePair(far, new, metric, unit, better, var, df, note, pool))
    if new or old:
        batch.rows.append(_DeltaRow(cell, metric, unit, status, pair, look, points, back, back_ref))


def _median(values: Sequence[float]) -> float:
    """``statistics.median`` of sorted values, the same number without its sorting again (a handful of
    values, once per cell, metric and lookback release: no numpy)."""
    mid = len(values) // 2
    return float(values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2)


def _unknown_session_notes(inp: DeltaInputs, sessions: Sessions, rows: Sequence[_DeltaRow]) -> list[str]:
    """Once per cluster whose compared cells have no between-session variance estimate."""
    unknown = sorted(
        {
            (r.cell[0], r.metric)
            for r in rows
            if r.pair is not None and ((sv := sessions.get((r.cell[0], r.metric))) is None or sv.tau2 is None)
        }
    )
    if not unknown or inp.same_session:
        return []
    notes = []
    for cluster in sorted({c for c, _m in unknown}):
        got = max((sv.n_differences for (c, _m), sv in sessions.items() if c == cluster), default=0)
        notes.append(
            f"between-session variance unknown on {cluster} ({got} release-to-release differences, "
            f"{MIN_DIFFERENCES} needed: too few earlier releases): its release-over-release intervals "
            "count the repeats' noise only"
        )
    return notes


def environment_notes(inp: DeltaInputs, sessions: Sessions) -> list[str]:
    """Per cluster, workload and metric whose rungs all moved alike (analysis/environment.py), what
    that says: with busy-host runs among them the environment moved, not the release. Judged on every
    succeeded run, busy ones included (left out, an all-busy release would have nothing to judge):
    ``inp`` holds them, and ``sessions`` are :func:`session_levels` of it."""
    if inp.baseline is None:
        return []
    values = inp.by_release.get(inp.release.id, {})
    old = inp.by_release.get(inp.baseline.id, {})
    groups: dict[tuple[str, str], list[Cell]] = defaultdict(list)
    for cell in inp.ordered_cells():
        groups[(cell[0], cell[1])].append(cell)
    heads: list[tuple[str, int]] = []  # (what a note opens with, busy runs) of each group
    rungs: list[list[ReleasePair]] = []
    for (cluster, workload), cells in groups.items():
        busy = sum(inp.busy_cells.get(c, 0) for c in cells)
        for metric in inp.metrics:
            var, df, _note = session_term(sessions.get((cluster, metric)), cluster, False)
            rungs.append(
                [
                    ReleasePair(
                        tuple(sorted(old.get(c, {}).get(metric, ()))),
                        tuple(sorted(values.get(c, {}).get(metric, ()))),
                        metric,
                        inp.unit(metric),
                        inp.directions.get(metric),
                        var,
                        df,
                    )
                    for c in cells
                ]
            )
            heads.append((f"{workload} on {cluster}, {metric}", busy))
    shifts = common_shifts(rungs, threshold_pct=inp.opts.threshold_pct, alpha=inp.opts.alpha)
    return [
        _environment_note(f"{head}: {shift.reason}", busy)
        for (head, busy), shift in zip(heads, shifts, strict=True)
        if shift.alike
    ]


def _environment_note(head: str, busy: int) -> str:
    if busy:
        return (
            f"{head}, and {busy} of their runs were measured on a busy host: the environment "
            "moved, not the release; rerun on quiet hosts before reading these verdicts"
        )
    return (
        f"{head}: a change of the environment (host load, driver, power cap) looks the same "
        "as one of the release; a same-session baseline (the plan's baseline:) tells them apart"
    )


def session_levels(inp: DeltaInputs) -> Sessions:
    """Between-session variance per (cluster, metric), pooled over the cluster's cells, from the
    earlier releases only (the lookback releases and the baseline, oldest first): each release's runs
    of a cell are one session. The release under test never enters its own noise estimate. Where a
    same-session baseline's re-run and its own earlier runs give a pool enough differences, these
    reruns of the same images decide alone (:func:`_from_reruns`)."""
    earlier = list(inp.history)
    if inp.baseline is not None and all(r.id != inp.baseline.id for r in earlier):
        earlier.append(inp.baseline)
    per: dict[tuple[str, str], list[list[Sequence[float]]]] = defaultdict(list)
    empty: dict[Cell, Mapping[str, list[float]]] = {}
    held = [inp.by_release.get(r.id, empty) for r in earlier]
    for cell in sorted({cell for values in held for cell in values}):
        of_cell = [values.get(cell, {}) for values in held]
        for metric in inp.metrics:
            per[(cell[0], metric)].append([v.get(metric, ()) for v in of_cell])
    sessions = session_variances(per)
    if inp.reruns and inp.baseline is not None:
        sessions.update(_from_reruns(inp, inp.baseline.id))
    return sessions


def _from_reruns(inp: DeltaInputs, baseline_id: int) -> Sessions:
    """Between-session variance from the same images run in two sessions (the baseline's earlier runs
    and its re-run beside the release), for each pool with enough of them (:func:`rerun_variances`)."""
    rerun = inp.by_release.get(baseline_id, {})
    pairs: dict[tuple[str, str], list[tuple[Sequence[float], Sequence[float]]]] = defaultdict(list)
    for cell in sorted(inp.reruns):
        earlier, beside = inp.reruns[cell], rerun.get(cell, {})
        for metric in inp.metrics:
            pairs[(cell[0], metric)].append((earlier.get(metric, ()), beside.get(metric, ())))
    return {key: sv for key, sv in rerun_variances(pairs).items() if sv.tau2 is not None}


def session_term(
    sv: SessionVariance | None, cluster: str, same_session: bool
) -> tuple[float, float | None, str | None]:
    """(variance added to the difference, its df, the reason that says so) for one comparison."""
    if same_session:
        return 0.0, None, "same-session baseline: no between-session variance added"
    if sv is None or sv.tau2 is None:
        return 0.0, None, None  # said once per cluster in the comparison's notes (release_deltas)
    source = (
        f"{sv.n_differences} reruns of the same images in another session, {sv.n_cells} cells on {cluster}"
        if sv.method == RERUN_METHOD
        else f"{sv.n_differences} release-to-release differences of {sv.n_cells} cells on {cluster}"
    )
    return 2.0 * sv.tau2, sv.df, f"between-session variance added: tau {sv.tau2**0.5 * 100:.2g}% ({source})"
