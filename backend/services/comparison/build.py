"""One release against its baseline release: database rows -> analysis inputs -> :class:`ReleaseComparison`.

Loading is a fixed number of queries whatever the size of the release: the release, its image
family, two for the runs of the release and its baseline (the runs, then their metrics), one narrow
query for the lookback releases (succeeded runs, analysed metrics only), one for the release's run
environments (each distinct JSON text decoded once), and one per catalog table in use. Only
succeeded runs enter the statistics; every other run is counted per cell and reported as missing.

The analysis runs once per build, batched: every ladder of the release in one
``analyze_ladders`` call, every release-over-release check in one ``compare_releases_many`` call
and every lookback in one ``lookback_many`` call, so each is one Benjamini-Hochberg family (the
comparisons of one release). A build is kept in memory and reused while the versions of what it read
are unchanged (:mod:`.cache`): a write that commits before a read begins makes that read build afresh.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.db.models import Release, RunStatus
from ablate.backend.services import adaptive, catalog, images
from ablate.backend.services.comparison.assemble import Loaded, assemble
from ablate.backend.services.comparison.cache import GLOBAL, WROTE, cache_for, family_versions
from ablate.backend.services.comparison.family import order_family
from ablate.backend.services.comparison.loading import (
    busy_runs,
    history_values,
    keep_same_session_baseline,
    load_catalog,
    load_env_rows,
    load_rows,
    pick_metrics,
    rerun_values,
    values_by_release,
)
from ablate.backend.services.comparison.model import ComparisonOptions, ReleaseComparison
from ablate.backend.services.errors import ValidationProblem
from ablate.backend.services.images import digest_of


@dataclass(frozen=True)
class _Target:
    """What a build of ``ref`` reads, resolved, and the key its result is kept under (None: not kept)."""

    release: Release
    baseline: Release | None
    source: str  # previous | explicit | none
    history: tuple[Release, ...]
    key: tuple[Any, ...] | None


def _target(
    session: Session, ref: str, baseline_ref: str | None, opts: ComparisonOptions, keep: bool
) -> _Target:
    versions = None
    if keep:
        # The versions first: whatever the build reads afterwards is at least this new (cache.py).
        images = [catalog.parse_release_ref(ref)[0]]
        if baseline_ref is not None:
            images.append(catalog.parse_release_ref(baseline_ref, "baseline")[0])
        versions = family_versions(session, images)
    release = catalog.get_release(session, ref)
    family = order_family(session.scalars(select(Release).where(Release.image == release.image)))
    index = next(i for i, r in enumerate(family) if r.id == release.id)
    history = family[max(0, index - opts.lookback) : index] if opts.lookback > 0 else []
    baseline: Release | None
    if baseline_ref is not None:
        baseline = catalog.get_release(session, baseline_ref, "baseline")
        source = "explicit"
        if baseline.id == release.id:
            raise ValidationProblem.at("baseline", "a release cannot be compared with itself")
    else:
        baseline = family[index - 1] if index > 0 else None
        source = "previous" if baseline else "none"
    key: tuple[Any, ...] | None = None
    read = [release.id, *([baseline.id] if baseline else []), *(r.id for r in history)]
    # A release made after the versions were read has none: built, not kept.
    if versions is not None and not versions.get(WROTE) and all(i in versions for i in read):
        key = (
            release.id,
            source,
            baseline.id if baseline else None,
            tuple(r.id for r in history),
            opts,
            tuple(versions[i] for i in read),
            versions[GLOBAL],
        )
    return _Target(release, baseline, source, tuple(history), key)


def build_release_comparison(
    session: Session,
    ref: str,
    *,
    baseline_ref: str | None = None,
    options: ComparisonOptions | None = None,
) -> ReleaseComparison:
    """The comparison of release ``ref`` (``image:tag``) against ``baseline_ref`` or its previous tag.

    Raises :class:`NotFound` for an unknown release. Never fails on a partial release: what is
    missing is listed in ``missing`` and per cell in ``cells``.
    """
    opts = options or ComparisonOptions()
    cache = cache_for(session)
    t = _target(session, ref, baseline_ref, opts, keep=cache is not None)
    if cache is not None and t.key is not None:
        hit = cache.get(t.key)
        if isinstance(hit, _Kept):
            return _with_adaptive(session, hit)
    kept = _build(session, t.release, t.baseline, t.source, list(t.history), opts)
    if cache is not None and t.key is not None:
        cache.put(t.key, kept, len(kept.comparison.runs) + len(kept.comparison.deltas))
    return _with_adaptive(session, kept)


# cluster, workload, variant, metric -> (summary verdict, indicated, improvement %) of the delta
CellVerdicts = Mapping[tuple[str, str, str, str], tuple[str, str | None, float | None]]


@dataclass(frozen=True)
class ReleaseVerdicts:
    """The verdict of every cell and metric of a release's comparison, and what it was against: what
    a cell's history reads from each release of the family (a few percent of the comparison's size)."""

    baseline: str | None  # the baseline release's ref
    cells: CellVerdicts

    @classmethod
    def of(cls, comparison: ReleaseComparison) -> ReleaseVerdicts:
        cells = {
            (d.cluster, d.workload, d.variant, d.metric): (
                d.summary_verdict,
                d.result.indicated if d.result else None,
                d.result.improvement_pct if d.result else None,
            )
            for d in comparison.deltas
        }
        return cls(comparison.baseline.ref if comparison.baseline else None, cells)


def release_verdicts(
    session: Session, ref: str, *, options: ComparisonOptions | None = None
) -> ReleaseVerdicts:
    """:class:`ReleaseVerdicts` of ``ref`` against its default baseline, kept apart from the full
    comparisons (under the same versions): a history over dozens of releases of thousands of cells
    reads them all, more than the cache holds of full comparisons."""
    opts = options or ComparisonOptions()
    full, cache = cache_for(session), cache_for(session, verdicts=True)
    t = _target(session, ref, None, opts, keep=cache is not None)  # versions read before the build's
    if cache is not None and t.key is not None:
        hit = cache.get(t.key)
        if isinstance(hit, ReleaseVerdicts):
            return hit
    kept = full.get(t.key) if full is not None and t.key is not None else None
    if not isinstance(kept, _Kept):
        # Built, not kept among full comparisons: a history's scan of the family would push out the
        # comparisons pages read.
        kept = _build(session, t.release, t.baseline, t.source, list(t.history), opts)
    verdicts = ReleaseVerdicts.of(kept.comparison)
    if cache is not None and t.key is not None:
        # About a tenth of the memory a run or delta of a full comparison weighs.
        cache.put(t.key, verdicts, len(verdicts.cells) // 10 + 1)
    return verdicts


@dataclass(frozen=True)
class _Kept:
    """A comparison as cached: all but the adaptive studies' summaries, which are read on every call
    (they follow the studies' own rows, which the versions do not count)."""

    comparison: ReleaseComparison
    studies: tuple[int, ...]  # the studies of the release's runs


def _with_adaptive(session: Session, kept: _Kept) -> ReleaseComparison:
    # Where each adaptive study of the release stopped (issue 28): added here, apart from assemble.
    found = tuple(adaptive.for_studies(session, kept.studies))
    # Without adaptive studies the kept object itself, with the JSON text it keeps (model.json_text).
    return replace(kept.comparison, adaptive=found) if found else kept.comparison


_gc_lock = threading.Lock()
_gc_builds = 0  # builds in progress that paused the collector


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for a build: a build allocates about a hundred objects per
    cell and metric (results, summaries, rows), which set off full collections over everything built
    so far, half its CPU time at 1,000 cells. What it makes is freed by reference counting; anything
    cyclic waits for the next collection after the last concurrent build ends (API handlers are threads)."""
    global _gc_builds
    with _gc_lock:
        if _gc_builds == 0 and not gc.isenabled():
            paused = False  # switched off by someone else: theirs to switch back on
        else:
            paused = True
            _gc_builds += 1
            gc.disable()
    try:
        yield
    finally:
        if paused:
            with _gc_lock:
                _gc_builds -= 1
                if _gc_builds == 0:
                    gc.enable()


def _build(
    session: Session,
    release: Release,
    baseline: Release | None,
    source: str,
    history: Sequence[Release],
    opts: ComparisonOptions,
) -> _Kept:
    with _collector_paused():
        ids = [release.id] + ([baseline.id] if baseline else [])
        rows = load_rows(session, release_ids=ids)
        earlier = keep_same_session_baseline(rows, release.id, baseline.id) if baseline is not None else None
        if earlier is not None:
            source = "same-session"
        cat = load_catalog(session, rows, [release, *([baseline] if baseline else []), *history])
        by_release = values_by_release(rows, cat)
        present = {m for cell in by_release.get(release.id, {}).values() for m in cell}
        metrics = pick_metrics(present, opts.metrics)
        # Busy-host runs leave the verdicts unless asked for (opts.busy_hosts); counted per cell either way.
        busy = busy_runs(rows)
        # The same values (one object) when no busy-host run leaves them: their session noise is read once.
        verdict_values = (
            by_release if opts.busy_hosts or not busy else values_by_release(rows, cat, skip=busy)
        )
        older = history_values(
            session, [r.id for r in history if r.id not in ids], metrics, cat, skip_busy=not opts.busy_hosts
        )
        by_release.update(older)
        if verdict_values is not by_release:
            verdict_values.update(older)
        env_rows = load_env_rows(session, release.id)
        digests = {
            d
            for _r, _v, status, _e, prov, _x in env_rows
            if status == RunStatus.succeeded and (d := digest_of(prov or {}))
        }
        # Only where the runs recorded their images (container runs): no query otherwise.
        found_new = images.components_of(session, digests) if digests else None
        found_old = images.found_components(session, baseline) if baseline is not None and found_new else None
        reruns = {}
        if earlier is not None and baseline is not None:
            skip = () if opts.busy_hosts else busy_runs(earlier)
            reruns = rerun_values(session, earlier, rows, baseline.id, cat, skip)
        loaded = Loaded(
            release,
            baseline,
            source,
            tuple(history),
            rows,
            cat,
            env_rows,
            by_release,
            metrics,
            found_old,
            found_new,
            verdict_values,
            frozenset(busy),
            reruns,
        )
        studies = {r.study_id for r in rows.runs.values() if r.release_id == release.id}
        return _Kept(assemble(loaded, opts), tuple(sorted(s for s in studies if s is not None)))
