"""The parts of a release comparison read straight from its rows: the release, each cell's runs and
why some did not succeed, each variant's environment, the runs listed, the busy-host notes."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ablate.backend.db.models import Release, RunStatus, Variant
from ablate.backend.services.comparison.loading import Catalog, Cell, Rows, RunRow
from ablate.backend.services.comparison.model import (
    BASE_VARIANT,
    DEFAULT_LADDER,
    CellStatus,
    FailedRun,
    ReleaseInfo,
    RunRecord,
    VariantInfo,
)


def release_info(r: Release) -> ReleaseInfo:
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


def busy_host_notes(current_runs: Mapping[int, RunRow], cat: Catalog, env_rows: Sequence[Any]) -> list[str]:
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


def baseline_variant(release_variants: Sequence[Variant]) -> str | None:
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


def variant_info(name: str, variant: Variant | None, by_variant: Mapping[int, list[tuple]]) -> VariantInfo:
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


def why_not(runs: Sequence[FailedRun], shown: int = 3) -> str:
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


def cell_statuses(
    current_runs: Mapping[int, RunRow],
    cat: Catalog,
    env_rows: Sequence[Any],
    grid: Mapping[str, list[str]],
    variant_names: list[str],
) -> list[CellStatus]:
    errors = {rid: err for rid, _v, _s, _e, _p, err in env_rows}
    by_cell: dict[Cell, list[tuple[int, int, str, str | None]]] = defaultdict(list)
    clusters, workloads_of, variants = cat.names  # not the ORM attributes, three a run
    for rid, (_rel, cl, wl, var, rep, status, kind, _study, _busy) in current_runs.items():
        by_cell[(clusters[cl], workloads_of[wl], variants[var])].append((rid, rep, status, kind))
    out = []
    for cluster, workloads in grid.items():
        for workload in workloads:
            for variant in variant_names:
                runs = sorted(by_cell.get((cluster, workload, variant), []))
                found = Counter(r[2] for r in runs)
                count = {s: found.get(s.value, 0) for s in RunStatus}
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


def run_records(rows: Rows, cat: Catalog, releases: Sequence[Release]) -> tuple[RunRecord, ...]:
    order = {r.id: i for i, r in enumerate(releases)}
    refs = {r.id: cat.releases[r.id].ref for r in releases}  # ORM attributes read once, not per run
    clusters, workloads, variants = cat.names
    vorder = {v.name: cat.variant_key(v) for v in cat.variants.values()}
    keyed = []
    for rid, (rel, cl, wl, var, rep, status, _kind, _study, _busy) in rows.runs.items():
        if rel not in order:
            continue
        record = RunRecord(
            run_id=rid,
            release=refs[rel],
            cluster=clusters[cl],
            workload=workloads[wl],
            variant=variants[var],
            repeat=rep,
            status=status,
            metrics=dict(sorted(rows.metrics.get(rid, {}).items())),
        )
        key = (order[rel], record.cluster, record.workload, vorder[record.variant], rep, rid)
        keyed.append((key, record))
    keyed.sort(key=lambda kr: kr[0])
    return tuple(record for _key, record in keyed)
