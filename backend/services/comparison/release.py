"""One release against its baseline release: database rows -> analysis inputs -> :class:`ReleaseComparison`.

Loading is a fixed number of queries whatever the size of the release: the release, its image
family, one query joining runs and run_metrics for the release and its baseline, one narrow query
for the lookback releases (succeeded runs, analysed metrics only), one for the release's run
environments, and one per catalog table in use. Only succeeded runs enter the statistics; every
other run is counted per cell and reported as missing.

The analysis runs once per build, batched: every ladder of the release in one
``analyze_ladders`` call, every release-over-release check in one ``compare_releases_many`` call
and every lookback in one ``lookback_many`` call, so each is one Benjamini-Hochberg family (the
comparisons of one release). A build is kept in memory and reused while the versions of what it read
are unchanged (:mod:`.cache`): a write that commits before a read begins makes that read build afresh.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.analysis.ablation import LadderInput, analyze_ladders
from ablate.backend.analysis.environment import common_shift
from ablate.backend.analysis.factorial import (
    FactorialDesign,
    analyze_factorial,
    factors_from_variant,
    find_factorial_design,
)
from ablate.backend.analysis.regression import LookbackRequest, ReleasePair
from ablate.backend.analysis.session import MIN_DIFFERENCES, SessionVariance, session_variance
from ablate.backend.db.models import Release, Run, RunStatus, Variant
from ablate.backend.domain.metrics import describe_metric
from ablate.backend.services import adaptive, catalog, images
from ablate.backend.services.comparison import failures
from ablate.backend.services.comparison.cache import GLOBAL, WROTE, cache_for, family_versions
from ablate.backend.services.comparison.loading import (
    ANALYSED_ERROR,
    ANALYSED_STATUS,
    Catalog,
    Cell,
    Rows,
    RunRow,
    busy_runs,
    history_values,
    keep_same_session_baseline,
    load_catalog,
    load_rows,
    metric_units,
    pick_metrics,
    values_by_release,
)
from ablate.backend.services.comparison.model import (
    BASE_VARIANT,
    DEFAULT_LADDER,
    MEMORY_METRICS,
    PRIMARY_METRICS,
    CellStatus,
    ClusterInfo,
    ComparisonOptions,
    FactorialEntry,
    FailedRun,
    HistoryPoint,
    LadderEntry,
    ReleaseComparison,
    ReleaseDelta,
    ReleaseInfo,
    RunRecord,
    VariantInfo,
    WorkloadInfo,
)
from ablate.backend.services.comparison.releases import manifest_diff, order_family
from ablate.backend.services.errors import ValidationProblem
from ablate.backend.services.images import digest_of


def _release_info(r: Release) -> ReleaseInfo:
    notes = r.notes or {}
    return ReleaseInfo(
        id=r.id,
        ref=r.ref,
        image=r.image,
        tag=r.tag,
        platform=r.platform,
        release_date=r.release_date.isoformat() if r.release_date else None,
        manifest=dict(sorted((r.manifest or {}).items())),
        driver_requirements=dict(sorted((r.driver_requirements or {}).items())),
        features=tuple(str(x) for x in notes.get("features") or ()),
        fixes=tuple(str(x) for x in notes.get("fixes") or ()),
        known_issues=tuple(str(x) for x in notes.get("known_issues") or ()),
    )


def _distinct(values: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    seen: dict[str, set[str]] = defaultdict(set)
    for mapping in values:
        for k, v in (mapping or {}).items():
            seen[str(k)].add(v if isinstance(v, str) else json.dumps(v, sort_keys=True))
    return {k: tuple(sorted(seen[k])) for k in sorted(seen)}


def _first_line(text: str | None) -> str | None:
    if not text:
        return None
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:300] or None


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
    # Where each adaptive study of the release stopped (issue 28): added here, apart from _assemble.
    found = tuple(adaptive.for_studies(session, kept.studies))
    # Without adaptive studies the kept object itself, with the JSON text it keeps (model.json_text).
    return replace(kept.comparison, adaptive=found) if found else kept.comparison


def _build(
    session: Session,
    release: Release,
    baseline: Release | None,
    source: str,
    history: Sequence[Release],
    opts: ComparisonOptions,
) -> _Kept:
    ids = [release.id] + ([baseline.id] if baseline else [])
    rows = load_rows(session, release_ids=ids)
    if baseline is not None and keep_same_session_baseline(rows, release.id, baseline.id):
        source = "same-session"
    cat = load_catalog(session, rows, [release, *([baseline] if baseline else []), *history])
    by_release = values_by_release(rows, cat)
    present = {m for cell in by_release.get(release.id, {}).values() for m in cell}
    metrics = pick_metrics(present, opts.metrics)
    # Busy-host runs leave the verdicts unless asked for (opts.busy_hosts); counted per cell either way.
    busy = busy_runs(rows)
    verdict_values = values_by_release(rows, cat, skip=() if opts.busy_hosts else busy)
    older = history_values(
        session, [r.id for r in history if r.id not in ids], metrics, cat, skip_busy=not opts.busy_hosts
    )
    by_release.update(older)
    verdict_values.update(older)
    env_rows = session.execute(
        select(
            Run.id, Run.variant_id, ANALYSED_STATUS, Run.environment, Run.provenance, ANALYSED_ERROR
        ).where(Run.release_id == release.id)
    ).all()
    digests = {
        d
        for _r, _v, status, _e, prov, _x in env_rows
        if status == RunStatus.succeeded and (d := digest_of(prov or {}))
    }
    # Only where the runs recorded their images (container runs): no query otherwise.
    found_new = images.components_of(session, digests) if digests else None
    found_old = images.found_components(session, baseline) if baseline is not None and found_new else None
    loaded = _Loaded(
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
    )
    studies = {r.study_id for r in rows.runs.values() if r.release_id == release.id}
    return _Kept(_assemble(loaded, opts), tuple(sorted(s for s in studies if s is not None)))


ValuesByRelease = Mapping[int, Mapping[Cell, Mapping[str, list[float]]]]


@dataclass(frozen=True)
class _Loaded:
    """What the queries of one build return: the input of :func:`_assemble`."""

    release: Release
    baseline: Release | None
    source: str  # previous | explicit | none
    history: tuple[Release, ...]  # lookback releases, oldest first
    rows: Rows
    cat: Catalog
    env_rows: Sequence[Any]  # (run id, variant id, status, environment, provenance, error)
    by_release: ValuesByRelease
    metrics: tuple[str, ...]
    found_old: dict[str, str] | None = None  # what the baseline's images hold (read from their files)
    found_new: dict[str, str] | None = None  # what this release's images hold
    verdict_values: ValuesByRelease | None = None  # by_release less busy-host runs (unless kept)
    busy: frozenset[int] = frozenset()  # busy-host runs of the release and its baseline


def _assemble(loaded: _Loaded, opts: ComparisonOptions) -> ReleaseComparison:
    release, baseline, source, history = loaded.release, loaded.baseline, loaded.source, loaded.history
    rows, cat, env_rows, by_release, metrics = (
        loaded.rows,
        loaded.cat,
        loaded.env_rows,
        loaded.by_release,
        loaded.metrics,
    )
    missing: list[str] = []
    current_runs = {rid: r for rid, r in rows.runs.items() if r.release_id == release.id}
    values = by_release.get(release.id, {})
    units = metric_units(rows)

    # Grid of this release: what was run (in any state), in ladder order.
    release_variants = sorted(
        {cat.variants[r.variant_id] for r in current_runs.values()}, key=cat.variant_key
    )
    base = _baseline_variant(release_variants)
    by_name = {v.name: v for v in cat.variants.values()}
    variant_names = [v.name for v in release_variants]
    if base is not None and base not in variant_names:
        variant_names.insert(0, base)  # a ladder without its Base still shows the empty first rung
    clusters = sorted({cat.clusters[r.cluster_id] for r in current_runs.values()}, key=lambda c: c.name)
    workloads = sorted({cat.workloads[r.workload_id] for r in current_runs.values()}, key=lambda w: w.name)
    grid: dict[str, list[str]] = {
        c.name: sorted(
            {cat.workloads[r.workload_id].name for r in current_runs.values() if r.cluster_id == c.id}
        )
        for c in clusters
    }

    cells = _cells(current_runs, cat, env_rows, grid, variant_names)
    if not current_runs:
        missing.append("no runs recorded for this release")
    elif not any(c.succeeded for c in cells):
        missing.append("no succeeded runs: no statistics")
    if base is not None and current_runs and not any(c.succeeded for c in cells if c.variant == base):
        missing.append(f"no succeeded {base} runs: speed-ups over {base} cannot be computed")
    # A reason many cells share is said once, with its count (not in every cell's line).
    shared = failures.shared_reasons(cells)
    missing.extend(failures.grouped_lines(shared))
    for c in cells:
        where = f"{c.variant} on {c.workload} ({c.cluster})"
        bad = len(c.not_succeeded)
        own = [r for r in c.not_succeeded if failures.reason_of(r) not in shared]
        why = _why_not(own)
        if len(own) < bad:
            why += f"{';' if own else ':'} {bad - len(own)} for a reason listed above"
        if c.succeeded == 0:
            tail = f" ({bad} not succeeded{why})" if bad else ""
            missing.append(f"{where}: no succeeded runs{tail}")
        else:
            if bad:
                missing.append(f"{where}: {bad} of {c.succeeded + bad} runs did not succeed{why}")
            if c.succeeded == 1:
                missing.append(f"{where}: one repeat only: no interval, no significance test")
    for cell, by_metric in sorted(values.items()):
        for m in metrics:
            if m not in by_metric:
                missing.append(f"{cell[2]} on {cell[1]} ({cell[0]}): metric {m} not reported")
    missing.extend(_busy_host_notes(current_runs, cat, env_rows))
    missing.extend(
        images.moved_tags(
            images.images_seen(
                (rid, prov or {}) for rid, _v, st, _e, prov, _x in env_rows if st == RunStatus.succeeded
            )
        )
    )

    directions = rows.directions
    ladders = _ladders(values, grid, variant_names, base, metrics, units, directions, opts)
    design = _factorial_design(release_variants)
    factorials = _factorials(values, grid, design, metrics, units, directions, opts) if design else ()
    busy_cells: dict[Cell, int] = defaultdict(int)
    for rid in loaded.busy:
        row = rows.runs.get(rid)
        busy_cell = cat.cell(row.cluster_id, row.workload_id, row.variant_id) if row else None
        if busy_cell is not None:
            busy_cells[busy_cell] += 1
    deltas, delta_notes = _deltas(
        loaded.verdict_values if loaded.verdict_values is not None else by_release,
        cat,
        release,
        baseline,
        history,
        metrics,
        units,
        directions,
        opts,
        busy_cells,
        same_session=source == "same-session",
    )
    missing.extend(delta_notes)
    environment = (
        _environment_notes(
            by_release, cat, release, baseline, history, metrics, units, directions, opts, busy_cells
        )
        if baseline is not None and source != "same-session"
        else []
    )
    if loaded.busy:
        n = len(loaded.busy)
        missing.append(
            f"{n} busy-host run{'s' if n != 1 else ''} "
            + (
                "kept in the release-over-release verdicts (busy_hosts=include): read them with care"
                if opts.busy_hosts
                else "left out of the release-over-release verdicts and lookbacks "
                "(busy_hosts=include keeps them)"
            )
        )
    untestable = [d for d in deltas if d.verdict == "not testable"]
    if untestable:
        missing.append(
            f"{len(untestable)} cell/metric pairs not testable (fewer than 2 repeats a side): no verdict"
        )
    diff = None
    if baseline is not None:
        diff = manifest_diff(baseline, release, loaded.found_old, loaded.found_new)
    else:
        missing.append(f"no earlier release of {release.image}: no release-over-release comparison")

    run_records = _run_records(rows, cat, [release] + ([baseline] if baseline else []))
    by_variant = defaultdict(list)
    for rid, var_id, status, env, prov, _err in env_rows:
        if status == RunStatus.succeeded:
            by_variant[var_id].append((rid, env, prov))
    variant_infos = tuple(_variant_info(name, by_name.get(name), by_variant) for name in variant_names)
    return ReleaseComparison(
        release=_release_info(release),
        baseline=_release_info(baseline) if baseline else None,
        baseline_source=source,
        lookback_releases=tuple(r.ref for r in history),
        method=opts.method_info(),
        metrics=metrics,
        primary_metric=next((m for m in metrics if m in PRIMARY_METRICS), metrics[0] if metrics else None),
        memory_metric=next((m for m in metrics if m in MEMORY_METRICS), None),
        baseline_variant=base,
        clusters=tuple(
            ClusterInfo(c.name, c.accelerator, c.device_model, c.nodes, c.devices_per_node, c.interconnect)
            for c in clusters
        ),
        workloads=tuple(
            WorkloadInfo(
                w.name,
                w.framework,
                w.model,
                w.data_parallel,
                w.tensor_parallel,
                w.pipeline_parallel,
                w.zero_stage,
                w.seq_len,
                w.micro_batch,
                w.global_batch,
                w.precision,
            )
            for w in workloads
        ),
        variants=variant_infos,
        cells=tuple(cells),
        ladders=ladders,
        factorial_design=design,
        factorial_note=design.label if design else "not a factorial design",
        factorials=factorials,
        deltas=deltas,
        manifest_diff=diff,
        runs=run_records,
        missing=tuple(missing),
        environment=tuple(environment),
    )


def _busy_host_notes(current_runs: Mapping[int, RunRow], cat: Catalog, env_rows: Sequence[Any]) -> list[str]:
    """Cells with succeeded runs that their runner recorded as measured on a busy host
    (``host_busy`` in the run's provenance, workers/runners/hostload.py), with the first reason."""
    busy: dict[Cell, list[str]] = defaultdict(list)
    total: dict[Cell, int] = defaultdict(int)
    for rid, _var, status, _env, prov, _err in env_rows:
        row = current_runs.get(rid)
        if status != RunStatus.succeeded or row is None:
            continue
        cell = cat.cell(row.cluster_id, row.workload_id, row.variant_id)
        if cell is None:
            continue
        total[cell] += 1
        if (prov or {}).get("host_busy") == "true":
            busy[cell].append(str((prov or {}).get("host_busy_reason") or "measured while the host was busy"))
    return [
        f"{cell[2]} on {cell[1]} ({cell[0]}): {len(reasons)} of {total[cell]} runs {sorted(reasons)[0]}"
        for cell, reasons in sorted(busy.items())
    ]


def _baseline_variant(release_variants: Sequence[Variant]) -> str | None:
    """The rung speed-ups are relative to.

    "Base" whenever the release runs the default ladder, even when no Base run exists (the report
    then says Base is missing, rather than quietly measuring against the next rung). Otherwise the
    first variant with no factors switched on, else the first variant in ladder order.
    """
    names = [v.name for v in release_variants]
    if BASE_VARIANT in names or any(n in DEFAULT_LADDER for n in names):
        return BASE_VARIANT
    first = next((v for v in release_variants if not v.factors), None)
    return first.name if first else (names[0] if names else None)


def _variant_info(name: str, variant: Variant | None, by_variant: Mapping[int, list[tuple]]) -> VariantInfo:
    runs = sorted(by_variant.get(variant.id, [])) if variant else []
    return VariantInfo(
        name=name,
        position=variant.position if variant else 0,
        factors=tuple(variant.factors or ()) if variant else (),
        env=dict(sorted((variant.env or {}).items())) if variant else {},
        image=variant.image if variant else None,
        description=variant.description if variant else None,
        n_succeeded=len(runs),
        environment=_distinct(env for _, env, _ in runs),
        provenance=_distinct(prov for _, _, prov in runs),
    )


def _why_not(runs: Sequence[FailedRun], shown: int = 3) -> str:
    """Why runs did not succeed, for the missing-data list: ": run 17 failed (benchmark): <its first
    error line>; ..." for the first few (the study page has them all)."""
    if not runs:
        return ""
    parts = []
    for r in runs[:shown]:
        kind = f" ({r.failure_kind})" if r.failure_kind else ""
        parts.append(f"run {r.run_id} {r.status}{kind}" + (f": {r.error}" if r.error else ""))
    more = f"; {len(runs) - shown} more" if len(runs) > shown else ""
    return ": " + "; ".join(parts) + more


def _cells(
    current_runs: Mapping[int, RunRow],
    cat: Catalog,
    env_rows: Sequence[Any],
    grid: Mapping[str, list[str]],
    variant_names: list[str],
) -> list[CellStatus]:
    errors = {rid: err for rid, _v, _s, _e, _p, err in env_rows}
    by_cell: dict[Cell, list[tuple[int, int, str, str | None]]] = defaultdict(list)
    for rid, (_rel, cl, wl, var, rep, status, kind, _study, _busy) in current_runs.items():
        by_cell[(cat.clusters[cl].name, cat.workloads[wl].name, cat.variants[var].name)].append(
            (rid, rep, status, kind)
        )
    out = []
    for cluster, workloads in grid.items():
        for workload in workloads:
            for variant in variant_names:
                runs = sorted(by_cell.get((cluster, workload, variant), []))
                count = {s: sum(1 for r in runs if r[2] == s) for s in RunStatus}
                out.append(
                    CellStatus(
                        cluster=cluster,
                        workload=workload,
                        variant=variant,
                        succeeded=count[RunStatus.succeeded],
                        failed=count[RunStatus.failed],
                        cancelled=count[RunStatus.cancelled],
                        pending=count[RunStatus.queued] + count[RunStatus.running],
                        repeats=tuple(sorted(r[1] for r in runs if r[2] == RunStatus.succeeded)),
                        not_succeeded=tuple(
                            FailedRun(rid, rep, status, kind, _first_line(errors.get(rid)))
                            for rid, rep, status, kind in runs
                            if status != RunStatus.succeeded
                        ),
                    )
                )
    return out


def _ladders(
    values: Mapping[Cell, Mapping[str, list[float]]],
    grid: Mapping[str, list[str]],
    variant_names: list[str],
    base: str | None,
    metrics: Sequence[str],
    units: Mapping[str, str],
    directions: Mapping[str, str],  # custom metric -> stored direction
    opts: ComparisonOptions,
) -> tuple[LadderEntry, ...]:
    keys: list[tuple[str, str, str]] = []
    inputs: list[LadderInput] = []
    for cluster, workloads in grid.items():
        for metric in metrics:
            unit = units.get(metric) or describe_metric(metric).unit
            for workload in workloads:
                # Every variant of the release is a rung, empty or not, so gaps show in the ladder.
                rungs = tuple(
                    (v, values.get((cluster, workload, v), {}).get(metric, ())) for v in variant_names
                )
                keys.append((cluster, workload, metric))
                inputs.append(LadderInput(rungs, metric, unit, base, directions.get(metric)))
    # One batched analysis for the whole release: its comparisons are one Benjamini-Hochberg family.
    analyses = analyze_ladders(
        inputs,
        alpha=opts.alpha,
        confidence=opts.confidence,
        n_resamples=opts.n_resamples,
        seed=opts.seed,
        noisy_cv=opts.noisy_cv,
        min_n=opts.min_n,
    )
    return tuple(LadderEntry(*k, a) for k, a in zip(keys, analyses, strict=True))


def _factorial_design(release_variants: Sequence[Variant]) -> FactorialDesign | None:
    """The full-factorial design among the release's variants, by their ``factors`` (the Variant
    rows); only when no variant declares any factor, by the factors their names spell
    ("+CompilerOpt+CkptOpt"), as results posted without factors have."""
    declared = [(v.name, tuple(v.factors or ())) for v in release_variants]
    if not any(f for _, f in declared):
        declared = [(v.name, tuple(sorted(factors_from_variant(v.name)))) for v in release_variants]
    return find_factorial_design(declared)


def _factorials(
    values: Mapping[Cell, Mapping[str, list[float]]],
    grid: Mapping[str, list[str]],
    design: FactorialDesign,
    metrics: Sequence[str],
    units: Mapping[str, str],
    directions: Mapping[str, str],  # custom metric -> stored direction
    opts: ComparisonOptions,
) -> tuple[FactorialEntry, ...]:
    out = []
    for cluster, workloads in grid.items():
        for metric in metrics:
            unit = units.get(metric) or describe_metric(metric).unit
            for workload in workloads:
                cells = [
                    (on, values.get((cluster, workload, variant), {}).get(metric, ()))
                    for variant, on in design.cells
                ]
                analysis = analyze_factorial(
                    cells,
                    metric,
                    unit=unit,
                    factors=design.factors,
                    confidence=opts.confidence,
                    better=directions.get(metric),
                )
                out.append(FactorialEntry(cluster, workload, metric, analysis))
    return tuple(out)


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


def _deltas(
    by_release: ValuesByRelease,
    cat: Catalog,
    release: Release,
    baseline: Release | None,
    history: Sequence[Release],
    metrics: Sequence[str],
    units: Mapping[str, str],
    directions: Mapping[str, str],  # custom metric -> stored direction
    opts: ComparisonOptions,
    busy_cells: Mapping[Cell, int] | None = None,  # busy-host runs per cell (release and baseline)
    same_session: bool = False,  # the baseline's runs were re-run beside this release's
) -> tuple[tuple[ReleaseDelta, ...], list[str]]:
    """(the deltas, notes on what is missing); the checks of the release run as one batch each, so
    the Benjamini-Hochberg adjustment covers the whole release."""
    notes: list[str] = []
    values = by_release.get(release.id, {})
    base_values = by_release.get(baseline.id, {}) if baseline else {}
    hist_values = [(r.ref, by_release.get(r.id, {})) for r in history]
    hist_by_ref = dict(hist_values)
    sessions = _session_levels(by_release, history, baseline, metrics)
    rank = {v.name: cat.variant_key(v) for v in cat.variants.values()}
    cells = sorted(set(values) | set(base_values), key=lambda c: (c[0], c[1], rank.get(c[2], (0, 0, c[2]))))
    rows: list[_DeltaRow] = []
    pairs: list[ReleasePair] = []
    looks: list[LookbackRequest] = []
    backs: list[ReleasePair] = []  # this release against the oldest of its lookback window
    no_baseline_data = 0
    for cell in cells:
        for metric in metrics:
            unit = units.get(metric) or describe_metric(metric).unit
            new = tuple(sorted(values.get(cell, {}).get(metric, ())))
            old = tuple(sorted(base_values.get(cell, {}).get(metric, ())))
            points = tuple(
                HistoryPoint(ref, len(v), float(statistics.median(v)))  # a handful of values: no numpy
                for ref, hv in hist_values
                if (v := hv.get(cell, {}).get(metric))
            )
            pair: int | None = None
            look: int | None = None
            if baseline is None:
                status = "no baseline release"
            elif not new:
                if cell not in values:
                    notes.append(
                        f"{cell[2]} on {cell[1]} ({cell[0]}): in {baseline.ref} but not in this release"
                    )
                status = "no data in this release"
            elif not old:
                status = "no baseline data"
                no_baseline_data += 1
            else:
                status = "compared"
                pair = len(pairs)
                var, df, note = _session_term(sessions.get((cell[0], metric)), cell[0], same_session)
                pool = f"{cell[0]}/{cell[1]}"  # a cluster and workload's rungs share a moderated variance
                pairs.append(ReleasePair(old, new, metric, unit, directions.get(metric), var, df, note, pool))
            if new and points:
                look = len(looks)
                looks.append(
                    LookbackRequest(
                        float(statistics.median(new)),
                        [p.median for p in points],
                        metric,
                        unit,
                        directions.get(metric),
                    )
                )
            back = back_ref = None
            window = points[-opts.lookback :] if opts.lookback > 0 else ()
            # A drift too slow for one step shows K releases back (with the lookback's minimum history).
            if new and len(window) >= max(2, opts.lookback_min_history):
                back_ref = window[0].release
                far = tuple(sorted(hist_by_ref[back_ref][cell][metric]))
                var, df, note = _session_term(sessions.get((cell[0], metric)), cell[0], False)
                back = len(backs)
                backs.append(
                    ReleasePair(
                        far, new, metric, unit, directions.get(metric), var, df, note, f"{cell[0]}/{cell[1]}"
                    )
                )
            if new or old:
                rows.append(_DeltaRow(cell, metric, unit, status, pair, look, points, back, back_ref))
    unknown = sorted(
        {
            (cell[0], metric)
            for cell, metric in ((r.cell, r.metric) for r in rows if r.pair is not None)
            if (sv := sessions.get((cell[0], metric))) is None or sv.tau2 is None
        }
    )
    if unknown and not same_session:
        for cluster in sorted({c for c, _m in unknown}):
            got = max((sv.n_differences for (c, _m), sv in sessions.items() if c == cluster), default=0)
            notes.append(
                f"between-session variance unknown on {cluster} ({got} release-to-release differences, "
                f"{MIN_DIFFERENCES} needed: too few earlier releases): its release-over-release intervals "
                "count the repeats' noise only"
            )
    if baseline is not None and no_baseline_data:
        notes.append(f"{no_baseline_data} cell/metric pairs have no succeeded runs in {baseline.ref}")
    results = opts.compare(pairs)
    lookbacks = opts.lookbacks(looks)
    trends = opts.trends(looks)
    far_results = opts.compare(backs)  # their own Benjamini-Hochberg family, as the lookbacks
    deltas = tuple(
        ReleaseDelta(
            *r.cell,
            r.metric,
            r.unit,
            r.status,
            None if r.pair is None else results[r.pair],
            None if r.look is None else lookbacks[r.look],
            r.history,
            busy_runs=(busy_cells or {}).get(r.cell, 0),
            busy_included=opts.busy_hosts,
            trend=None if r.look is None else trends[r.look],
            k_back=None if r.back is None else far_results[r.back],
            k_back_release=r.back_release,
        )
        for r in rows
    )
    return deltas, notes


def _environment_notes(
    by_release: ValuesByRelease,
    cat: Catalog,
    release: Release,
    baseline: Release,
    history: Sequence[Release],
    metrics: Sequence[str],
    units: Mapping[str, str],
    directions: Mapping[str, str],
    opts: ComparisonOptions,
    busy_cells: Mapping[Cell, int],
) -> list[str]:
    """Per cluster, workload and metric whose rungs all moved alike (analysis/environment.py), what
    that says: with busy-host runs among them the environment moved, not the release. Judged on every
    succeeded run, busy ones included (left out, an all-busy release would have nothing to judge)."""
    values = by_release.get(release.id, {})
    old = by_release.get(baseline.id, {})
    sessions = _session_levels(by_release, history, baseline, metrics)
    groups: dict[tuple[str, str], list[Cell]] = defaultdict(list)
    rank = {v.name: cat.variant_key(v) for v in cat.variants.values()}
    for cell in sorted(set(values) | set(old), key=lambda c: (c[0], c[1], rank.get(c[2], (0, 0, c[2])))):
        groups[(cell[0], cell[1])].append(cell)
    notes: list[str] = []
    for (cluster, workload), cells in groups.items():
        busy = sum(busy_cells.get(c, 0) for c in cells)
        for metric in metrics:
            unit = units.get(metric) or describe_metric(metric).unit
            var, df, _note = _session_term(sessions.get((cluster, metric)), cluster, False)
            pairs = [
                ReleasePair(
                    tuple(sorted(old.get(c, {}).get(metric, ()))),
                    tuple(sorted(values.get(c, {}).get(metric, ()))),
                    metric,
                    unit,
                    directions.get(metric),
                    var,
                    df,
                )
                for c in cells
            ]
            shift = common_shift(pairs, threshold_pct=opts.threshold_pct, alpha=opts.alpha)
            if not shift.alike:
                continue
            head = f"{workload} on {cluster}, {metric}: {shift.reason}"
            if busy:
                notes.append(
                    f"{head}, and {busy} of their runs were measured on a busy host: the environment "
                    "moved, not the release; rerun on quiet hosts before reading these verdicts"
                )
            else:
                notes.append(
                    f"{head}: a change of the environment (host load, driver, power cap) looks the same "
                    "as one of the release; a same-session baseline (the plan's baseline:) tells them apart"
                )
    return notes


def _session_levels(
    by_release: ValuesByRelease, history: Sequence[Release], baseline: Release | None, metrics: Sequence[str]
) -> dict[tuple[str, str], SessionVariance]:
    """Between-session variance per (cluster, metric), pooled over the cluster's cells, from the
    earlier releases only (the lookback releases and the baseline, oldest first): each release's runs
    of a cell are one session. The release under test never enters its own noise estimate."""
    earlier = list(history)
    if baseline is not None and all(r.id != baseline.id for r in earlier):
        earlier.append(baseline)
    per: dict[tuple[str, str], list[list[list[float]]]] = defaultdict(list)
    cells = sorted({cell for r in earlier for cell in by_release.get(r.id, {})})
    for cell in cells:
        for metric in metrics:
            sessions = [list(by_release.get(r.id, {}).get(cell, {}).get(metric, ())) for r in earlier]
            per[(cell[0], metric)].append(sessions)
    return {key: session_variance(groups) for key, groups in per.items()}


def _session_term(
    sv: SessionVariance | None, cluster: str, same_session: bool
) -> tuple[float, float | None, str | None]:
    """(variance added to the difference, its df, the reason that says so) for one comparison."""
    if same_session:
        return 0.0, None, "same-session baseline: no between-session variance added"
    if sv is None or sv.tau2 is None:
        return 0.0, None, None  # said once per cluster in the comparison's notes (_deltas)
    return (
        2.0 * sv.tau2,
        sv.df,
        f"between-session variance added: tau {sv.tau2**0.5 * 100:.2g}% "
        f"({sv.n_differences} release-to-release differences of {sv.n_cells} cells on {cluster})",
    )


def _run_records(rows: Rows, cat: Catalog, releases: Sequence[Release]) -> tuple[RunRecord, ...]:
    order = {r.id: i for i, r in enumerate(releases)}
    records = []
    for rid, (rel, cl, wl, var, rep, status, _kind, _study, _busy) in rows.runs.items():
        if rel not in order:
            continue
        records.append(
            RunRecord(
                run_id=rid,
                release=cat.releases[rel].ref,
                cluster=cat.clusters[cl].name,
                workload=cat.workloads[wl].name,
                variant=cat.variants[var].name,
                repeat=rep,
                status=status,
                metrics=dict(sorted(rows.metrics.get(rid, {}).items())),
            )
        )
    vorder = {v.name: cat.variant_key(v) for v in cat.variants.values()}
    rank = {r.ref: i for r, i in ((r, order[r.id]) for r in releases)}
    records.sort(
        key=lambda r: (rank[r.release], r.cluster, r.workload, vorder[r.variant], r.repeat, r.run_id)
    )
    return tuple(records)
