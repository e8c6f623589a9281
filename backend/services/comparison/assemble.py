"""What the queries of one build returned -> :class:`ReleaseComparison`: the grid of the release, its
ladders and factorial effects, its deltas (:mod:`.deltas`), and the notes on what is missing."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ablate.backend.analysis.ablation import LadderInput, analyze_ladders
from ablate.backend.analysis.factorial import (
    FactorialDesign,
    analyze_factorial,
    factors_from_variant,
    find_factorial_design,
)
from ablate.backend.analysis.manifest import ManifestDiff
from ablate.backend.db.models import Cluster, Release, RunStatus, Variant, Workload
from ablate.backend.domain.catalog import WorkloadInfo
from ablate.backend.domain.metrics import describe_metric
from ablate.backend.services import images
from ablate.backend.services.comparison import failures
from ablate.backend.services.comparison.deltas import (
    DeltaInputs,
    ValuesByRelease,
    environment_notes,
    release_deltas,
    session_levels,
)
from ablate.backend.services.comparison.family import manifest_diff
from ablate.backend.services.comparison.loading import Catalog, Cell, Rows, RunRow, metric_units
from ablate.backend.services.comparison.model import (
    MEMORY_METRICS,
    PRIMARY_METRICS,
    CellStatus,
    ClusterInfo,
    ComparisonOptions,
    FactorialEntry,
    LadderEntry,
    ReleaseComparison,
    ReleaseDelta,
)
from ablate.backend.services.comparison.records import (
    baseline_variant,
    busy_host_notes,
    cell_statuses,
    release_info,
    run_records,
    variant_info,
    why_not,
)


@dataclass(frozen=True)
class Loaded:
    """What the queries of one build return: the input of :func:`assemble`."""

    release: Release
    baseline: Release | None
    source: str  # previous | explicit | same-session | none
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
    # A same-session baseline's own earlier session, per cell: reruns of the same images (session noise)
    reruns: Mapping[Cell, Mapping[str, list[float]]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Grid:
    """What the release ran (in any state), in ladder order."""

    current_runs: Mapping[int, RunRow]
    release_variants: list[Variant]
    base: str | None  # the rung speed-ups are relative to
    variant_names: list[str]
    clusters: list[Cluster]
    workloads: list[Workload]
    grid: dict[str, list[str]]  # cluster -> its workloads


@dataclass(frozen=True)
class _Frame:
    """What the ladders and factorial effects of a release read."""

    values: Mapping[Cell, Mapping[str, list[float]]]
    grid: Mapping[str, list[str]]
    variant_names: list[str]
    base: str | None
    metrics: Sequence[str]
    units: Mapping[str, str]
    directions: Mapping[str, str]  # custom metric -> stored direction
    opts: ComparisonOptions

    def unit(self, metric: str) -> str:
        return self.units.get(metric) or describe_metric(metric).unit


def _grid_of(loaded: Loaded) -> _Grid:
    cat = loaded.cat
    current = {rid: r for rid, r in loaded.rows.runs.items() if r.release_id == loaded.release.id}
    release_variants = sorted({cat.variants[r.variant_id] for r in current.values()}, key=cat.variant_key)
    base = baseline_variant(release_variants)
    variant_names = [v.name for v in release_variants]
    if base is not None and base not in variant_names:
        variant_names.insert(0, base)  # a ladder without its Base still shows the empty first rung
    clusters = sorted({cat.clusters[r.cluster_id] for r in current.values()}, key=lambda c: c.name)
    workloads = sorted({cat.workloads[r.workload_id] for r in current.values()}, key=lambda w: w.name)
    names = cat.names[1]  # workload names, not an ORM attribute per run
    by_cluster: dict[int, set[str]] = defaultdict(set)  # one pass over the runs, not one per cluster
    for r in current.values():
        by_cluster[r.cluster_id].add(names[r.workload_id])
    grid = {c.name: sorted(by_cluster[c.id]) for c in clusters}
    return _Grid(current, release_variants, base, variant_names, clusters, workloads, grid)


def assemble(loaded: Loaded, opts: ComparisonOptions) -> ReleaseComparison:
    g = _grid_of(loaded)
    rows, cat, metrics = loaded.rows, loaded.cat, loaded.metrics
    values = loaded.by_release.get(loaded.release.id, {})
    cells = cell_statuses(g.current_runs, cat, loaded.env_rows, g.grid, g.variant_names)
    missing = _cell_notes(loaded, g, cells, values)
    frame = _Frame(
        values, g.grid, g.variant_names, g.base, metrics, metric_units(rows), rows.directions, opts
    )
    ladders = _ladders(frame)
    design = _factorial_design(g.release_variants)
    factorials = _factorials(frame, design) if design else ()
    deltas, more, environment = _deltas_and_notes(loaded, frame)
    missing.extend(more)
    diff = None
    if loaded.baseline is not None:
        diff = manifest_diff(loaded.baseline, loaded.release, loaded.found_old, loaded.found_new)
    else:
        missing.append(f"no earlier release of {loaded.release.image}: no release-over-release comparison")
    parts = _Parts(
        tuple(cells), ladders, design, factorials, deltas, diff, tuple(missing), tuple(environment)
    )
    return _comparison(loaded, g, opts, parts)


def _cell_notes(
    loaded: Loaded, g: _Grid, cells: Sequence[CellStatus], values: Mapping[Cell, Mapping[str, list[float]]]
) -> list[str]:
    """What is missing per cell: runs that did not succeed (a reason many share said once), one
    repeat only, metrics not reported, busy hosts, image tags that moved."""
    missing: list[str] = []
    base, current = g.base, g.current_runs
    if not current:
        missing.append("no runs recorded for this release")
    elif not any(c.succeeded for c in cells):
        missing.append("no succeeded runs: no statistics")
    if base is not None and current and not any(c.succeeded for c in cells if c.variant == base):
        missing.append(f"no succeeded {base} runs: speed-ups over {base} cannot be computed")
    # A reason many cells share is said once, with its count (not in every cell's line).
    shared = failures.shared_reasons(cells)
    missing.extend(failures.grouped_lines(shared))
    for c in cells:
        where = f"{c.variant} on {c.workload} ({c.cluster})"
        bad = len(c.not_succeeded)
        own = [r for r in c.not_succeeded if failures.reason_of(r) not in shared]
        why = why_not(own)
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
        for m in loaded.metrics:
            if m not in by_metric:
                missing.append(f"{cell[2]} on {cell[1]} ({cell[0]}): metric {m} not reported")
    env_rows = loaded.env_rows
    missing.extend(busy_host_notes(current, loaded.cat, env_rows))
    succeeded = ((rid, prov or {}) for rid, _v, st, _e, prov, _x in env_rows if st == RunStatus.succeeded)
    missing.extend(images.moved_tags(images.images_seen(succeeded)))
    return missing


def _deltas_and_notes(loaded: Loaded, frame: _Frame) -> tuple[tuple[ReleaseDelta, ...], list[str], list[str]]:
    """(the deltas, the notes on them: missing data, busy hosts, cells not testable; the workloads whose
    rungs moved alike). The between-session variance is estimated once per set of values."""
    opts, rows, cat = frame.opts, loaded.rows, loaded.cat
    busy_cells: dict[Cell, int] = defaultdict(int)
    for rid in loaded.busy:
        row = rows.runs.get(rid)
        busy_cell = cat.cell(row.cluster_id, row.workload_id, row.variant_id) if row else None
        if busy_cell is not None:
            busy_cells[busy_cell] += 1
    verdict_values = loaded.verdict_values if loaded.verdict_values is not None else loaded.by_release
    shape = (
        cat,
        loaded.release,
        loaded.baseline,
        loaded.history,
        frame.metrics,
        frame.units,
        frame.directions,
    )
    same = loaded.source == "same-session"
    inp = DeltaInputs(verdict_values, *shape, opts, busy_cells, same_session=same, reruns=loaded.reruns)
    sessions = session_levels(inp)
    deltas, notes = release_deltas(inp, sessions)
    environment: list[str] = []
    if loaded.baseline is not None and not same:
        # Judged on every succeeded run, busy ones included: the same sessions unless busy runs left.
        full = DeltaInputs(loaded.by_release, *shape, opts, busy_cells)
        same_values = verdict_values is loaded.by_release or not loaded.busy or opts.busy_hosts
        environment = environment_notes(full, sessions if same_values else session_levels(full))
    return deltas, notes + _busy_notes(loaded, opts, deltas), environment


def _busy_notes(loaded: Loaded, opts: ComparisonOptions, deltas: Sequence[ReleaseDelta]) -> list[str]:
    notes = []
    if loaded.busy:
        n = len(loaded.busy)
        notes.append(
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
        notes.append(
            f"{len(untestable)} cell/metric pairs not testable (fewer than 2 repeats a side): no verdict"
        )
    return notes


@dataclass(frozen=True)
class _Parts:
    """The analysed parts of a comparison, as :func:`assemble` made them."""

    cells: tuple[CellStatus, ...]
    ladders: tuple[LadderEntry, ...]
    design: FactorialDesign | None
    factorials: tuple[FactorialEntry, ...]
    deltas: tuple[ReleaseDelta, ...]
    diff: ManifestDiff | None
    missing: tuple[str, ...]
    environment: tuple[str, ...]


def _comparison(loaded: Loaded, g: _Grid, opts: ComparisonOptions, parts: _Parts) -> ReleaseComparison:
    release, baseline, metrics = loaded.release, loaded.baseline, loaded.metrics
    records = run_records(loaded.rows, loaded.cat, [release] + ([baseline] if baseline else []))
    by_variant = defaultdict(list)
    for rid, var_id, status, env, prov, _err in loaded.env_rows:
        if status == RunStatus.succeeded:
            by_variant[var_id].append((rid, env, prov))
    by_name = {v.name: v for v in loaded.cat.variants.values()}
    design = parts.design
    return ReleaseComparison(
        release=release_info(release),
        baseline=release_info(baseline) if baseline else None,
        baseline_source=loaded.source,
        lookback_releases=tuple(r.ref for r in loaded.history),
        method=opts.method_info(),
        metrics=metrics,
        primary_metric=next((m for m in metrics if m in PRIMARY_METRICS), metrics[0] if metrics else None),
        memory_metric=next((m for m in metrics if m in MEMORY_METRICS), None),
        baseline_variant=g.base,
        clusters=tuple(
            ClusterInfo(c.name, c.accelerator, c.device_model, c.nodes, c.devices_per_node, c.interconnect)
            for c in g.clusters
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
            for w in g.workloads
        ),
        variants=tuple(variant_info(name, by_name.get(name), by_variant) for name in g.variant_names),
        cells=parts.cells,
        ladders=parts.ladders,
        factorial_design=design,
        factorial_note=design.label if design else "not a factorial design",
        factorials=parts.factorials,
        deltas=parts.deltas,
        manifest_diff=parts.diff,
        runs=records,
        missing=parts.missing,
        environment=parts.environment,
    )


def _ladders(frame: _Frame) -> tuple[LadderEntry, ...]:
    keys: list[tuple[str, str, str]] = []
    inputs: list[LadderInput] = []
    values = frame.values
    for cluster, workloads in frame.grid.items():
        for metric in frame.metrics:
            unit = frame.unit(metric)
            for workload in workloads:
                # Every variant of the release is a rung, empty or not, so gaps show in the ladder.
                rungs = tuple(
                    (v, values.get((cluster, workload, v), {}).get(metric, ())) for v in frame.variant_names
                )
                keys.append((cluster, workload, metric))
                inputs.append(LadderInput(rungs, metric, unit, frame.base, frame.directions.get(metric)))
    # One batched analysis for the whole release: its comparisons are one Benjamini-Hochberg family.
    analyses = analyze_ladders(inputs, options=frame.opts.ladder_options)
    return tuple(LadderEntry(*k, a) for k, a in zip(keys, analyses, strict=True))


def _factorial_design(release_variants: Sequence[Variant]) -> FactorialDesign | None:
    """The full-factorial design among the release's variants, by their ``factors`` (the Variant
    rows); only when no variant declares any factor, by the factors their names spell
    ("+CompilerOpt+CkptOpt"), as results posted without factors have."""
    declared = [(v.name, tuple(v.factors or ())) for v in release_variants]
    if not any(f for _, f in declared):
        declared = [(v.name, tuple(sorted(factors_from_variant(v.name)))) for v in release_variants]
    return find_factorial_design(declared)


def _factorials(frame: _Frame, design: FactorialDesign) -> tuple[FactorialEntry, ...]:
    out = []
    for cluster, workloads in frame.grid.items():
        for metric in frame.metrics:
            unit = frame.unit(metric)
            for workload in workloads:
                cells = [
                    (on, frame.values.get((cluster, workload, variant), {}).get(metric, ()))
                    for variant, on in design.cells
                ]
                analysis = analyze_factorial(
                    cells,
                    metric,
                    unit=unit,
                    factors=design.factors,
                    confidence=frame.opts.confidence,
                    better=frame.directions.get(metric),
                )
                out.append(FactorialEntry(cluster, workload, metric, analysis))
    return tuple(out)
