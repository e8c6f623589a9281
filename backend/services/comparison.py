"""Release comparison: database rows -> analysis inputs -> one :class:`ReleaseComparison`.

What the comparison page, ``GET /api/v1/releases/{ref}/comparison``, every report format and the
dashboard read. It holds the analysis dataclasses themselves (so the chart functions take them
directly) plus what a reader needs beside them: which cells are missing or failed, environment and
provenance per variant, the manifest diff against the baseline release, and the method.

Loading is a fixed number of queries whatever the size of the release: the release, its image
family, one query joining runs and run_metrics for the release and its baseline, one narrow query
for the lookback releases (succeeded runs, analysed metrics only), one for the release's run
environments, and one per catalog table in use. Only succeeded runs enter the statistics; every
other run is counted per cell and reported as missing.

The analysis runs once per build, batched: every ladder of the release in one
``analyze_ladders`` call and every release-over-release check in one ``compare_releases_many``
call, so the bootstraps run in a handful of vectorised ``scipy.stats.bootstrap`` calls. Nothing is
memoised: a build after new data costs the same as any other.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from typing import Any

from packaging.version import InvalidVersion, Version
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.analysis.ablation import LadderAnalysis, LadderInput, analyze_ladders
from backend.analysis.factorial import (
    FactorialAnalysis,
    FactorialDesign,
    analyze_factorial,
    factors_from_variant,
    find_factorial_design,
)
from backend.analysis.manifest import ManifestDiff, diff_manifests
from backend.analysis.metrics import describe_metric
from backend.analysis.regression import (
    TEST_NAME,
    LookbackResult,
    RegressionResult,
    ReleasePair,
    compare_releases_many,
    lookback,
)
from backend.analysis.stats import DEFAULT_N_RESAMPLES
from backend.db.models import Cluster, Release, Run, RunMetric, RunStatus, Study, Variant, Workload
from backend.services import catalog
from backend.services.errors import NotFound, ValidationProblem

SCHEMA_VERSION = "1.0"

# The default ladder (DESIGN.md): breaks ties in ladder order when variants carry no position.
DEFAULT_LADDER: tuple[str, ...] = (
    "Base",
    "Base+ACCL",
    "AC2+ACCL",
    "AC2+ACCL+CompilerOpt",
    "AC2+ACCL+CompilerOpt+CkptOpt",
)
BASE_VARIANT = "Base"
# The first of each group that a release has is analysed; other metrics stay in the per-run export.
PRIMARY_METRICS: tuple[str, ...] = ("throughput_tokens_per_s", "throughput_samples_per_s", "step_time_s")
MEMORY_METRICS: tuple[str, ...] = ("peak_memory_gib", "peak_memory_reserved_gib")
INTERVAL_METHOD = "percentile bootstrap of the median (ratio of medians for two samples)"


@dataclass(frozen=True)
class ComparisonOptions:
    """Thresholds and statistical settings; stored in the result so a report states its method."""

    threshold_pct: float = 3.0
    alpha: float = 0.05
    confidence: float = 0.95
    n_resamples: int = DEFAULT_N_RESAMPLES
    seed: int = 0
    lookback: int = 5
    z_threshold: float = 2.0
    noisy_cv: float = 0.05
    min_n: int = 3
    # None: the primary and memory metric the release has (see PRIMARY_METRICS, MEMORY_METRICS).
    metrics: tuple[str, ...] | None = None

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> ComparisonOptions:
        """Defaults from :class:`backend.config.Settings` (threshold there is a fraction: 0.03 = 3%)."""
        values: dict[str, Any] = {
            "threshold_pct": float(settings.regression_threshold) * 100.0,
            "alpha": float(settings.significance_alpha),
            "lookback": int(settings.lookback_releases),
            "noisy_cv": float(settings.noisy_cv),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


# Result model ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseInfo:
    id: int
    ref: str
    image: str
    tag: str
    platform: str
    release_date: str | None
    manifest: dict[str, Any]
    driver_requirements: dict[str, Any]
    features: tuple[str, ...]
    fixes: tuple[str, ...]
    known_issues: tuple[str, ...]


@dataclass(frozen=True)
class VariantInfo:
    name: str
    position: int
    factors: tuple[str, ...]
    env: dict[str, Any]
    image: str | None
    description: str | None
    n_succeeded: int
    # key -> sorted distinct values over the variant's succeeded runs in this release
    environment: dict[str, tuple[str, ...]]
    provenance: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class WorkloadInfo:
    name: str
    framework: str | None
    model: str | None
    data_parallel: int
    tensor_parallel: int
    pipeline_parallel: int
    zero_stage: int | None
    seq_len: int | None
    micro_batch: int | None
    global_batch: int | None
    precision: str | None


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    accelerator: str
    device_model: str | None
    nodes: int
    devices_per_node: int
    interconnect: str | None


@dataclass(frozen=True)
class FailedRun:
    run_id: int
    repeat: int
    status: str
    failure_kind: str | None
    error: str | None  # first line only: the run page has the rest


@dataclass(frozen=True)
class CellStatus:
    """Runs of one cluster x workload x variant in this release, by status."""

    cluster: str
    workload: str
    variant: str
    succeeded: int
    failed: int
    cancelled: int
    pending: int  # queued or running
    repeats: tuple[int, ...]  # repeat numbers of the succeeded runs
    not_succeeded: tuple[FailedRun, ...]


@dataclass(frozen=True)
class LadderEntry:
    cluster: str
    workload: str
    metric: str
    analysis: LadderAnalysis


@dataclass(frozen=True)
class FactorialEntry:
    """Main effects and two-way interactions of the release's factorial design, one cell and metric."""

    cluster: str
    workload: str
    metric: str
    analysis: FactorialAnalysis


@dataclass(frozen=True)
class HistoryPoint:
    release: str
    n: int
    median: float


@dataclass(frozen=True)
class ReleaseDelta:
    """One cell and metric, this release against the baseline release, plus the lookback check."""

    cluster: str
    workload: str
    variant: str
    metric: str
    unit: str
    status: str  # compared | no baseline release | no baseline data | no data in this release
    result: RegressionResult | None
    lookback: LookbackResult | None
    history: tuple[HistoryPoint, ...]  # lookback releases with data, oldest first

    @property
    def verdict(self) -> str | None:
        return self.result.verdict if self.result else None


@dataclass(frozen=True)
class RunRecord:
    run_id: int
    release: str
    cluster: str
    workload: str
    variant: str
    repeat: int
    status: str
    metrics: dict[str, tuple[float, str]]  # name -> (value, unit), sorted by name


@dataclass(frozen=True)
class MethodInfo:
    interval: str
    confidence: float
    n_resamples: int
    seed: int
    test: str
    alpha: float
    threshold_pct: float
    lookback: int
    z_threshold: float
    noisy_cv: float
    min_n: int
    runs_used: str = "succeeded runs only; one summary value per run and metric"


@dataclass(frozen=True)
class ReleaseComparison:
    """Everything about one release against its baseline; ``to_json_dict()`` is the API body."""

    release: ReleaseInfo
    baseline: ReleaseInfo | None
    baseline_source: str  # previous | explicit | none
    lookback_releases: tuple[str, ...]  # oldest first
    method: MethodInfo
    metrics: tuple[str, ...]
    primary_metric: str | None
    memory_metric: str | None
    baseline_variant: str | None
    clusters: tuple[ClusterInfo, ...]
    workloads: tuple[WorkloadInfo, ...]
    variants: tuple[VariantInfo, ...]  # ladder order
    cells: tuple[CellStatus, ...]
    ladders: tuple[LadderEntry, ...]
    # The variants' factor sets cover every on/off combination of these factors (None: they don't).
    factorial_design: FactorialDesign | None
    factorial_note: str  # e.g. "2x2 factorial (ckpt_opt x compiler_opt)" or "not a factorial design"
    factorials: tuple[FactorialEntry, ...]  # per cluster x workload x metric; empty when not factorial
    deltas: tuple[ReleaseDelta, ...]
    manifest_diff: ManifestDiff | None
    runs: tuple[RunRecord, ...]  # this release and the baseline release
    missing: tuple[str, ...]  # what the reader should know is not there
    schema_version: str = SCHEMA_VERSION
    kind: str = "release"

    def ladder_map(self, cluster: str, metric: str) -> dict[str, LadderAnalysis]:
        """workload -> ladder, as the chart functions take it (workload order of the release)."""
        return {e.workload: e.analysis for e in self.ladders if e.cluster == cluster and e.metric == metric}

    def factorial_map(self, cluster: str, metric: str) -> dict[str, FactorialAnalysis]:
        """workload -> factorial analysis (workload order of the release); empty when not factorial."""
        return {
            e.workload: e.analysis for e in self.factorials if e.cluster == cluster and e.metric == metric
        }

    def verdict_counts(self, metric: str | None = None) -> dict[str, int]:
        counts = {"improved": 0, "regressed": 0, "unchanged": 0, "not compared": 0}
        for d in self.deltas:
            if metric is None or d.metric == metric:
                counts[d.verdict or "not compared"] += 1
        return counts

    @property
    def regressions(self) -> tuple[ReleaseDelta, ...]:
        return tuple(d for d in self.deltas if d.verdict == "regressed")

    @property
    def suspects(self) -> tuple[str, ...]:
        """Components changed since the baseline, e.g. "vllm 0.12.0 -> 0.16.0": where to look first."""
        return suspects_of(self.manifest_diff)

    def to_json_dict(self) -> dict[str, Any]:
        return to_jsonable(self.json_body())

    def json_body(self) -> dict[str, Any]:
        """The API body before conversion: fields (still dataclasses) plus the derived summaries."""
        out = _fields_of(self)
        out["verdict_counts"] = {m: self.verdict_counts(m) for m in self.metrics}
        out["suspects"] = list(self.suspects)
        return out


@dataclass(frozen=True)
class RunSet:
    """One side of a two-set comparison: how it was chosen and which runs it holds."""

    label: str
    run_ids: tuple[int, ...]
    releases: tuple[str, ...]


@dataclass(frozen=True)
class RunSetComparison:
    """Two arbitrary sets of runs, cell against cell (see :func:`compare_run_sets`)."""

    baseline: RunSet
    contender: RunSet
    method: MethodInfo
    metrics: tuple[str, ...]
    deltas: tuple[ReleaseDelta, ...]
    manifest_diff: ManifestDiff | None
    missing: tuple[str, ...]
    schema_version: str = SCHEMA_VERSION
    kind: str = "runs"

    def to_json_dict(self) -> dict[str, Any]:
        return to_jsonable(self.json_body())

    def json_body(self) -> dict[str, Any]:
        out = _fields_of(self)
        out["suspects"] = list(suspects_of(self.manifest_diff))
        return out


def suspects_of(diff: ManifestDiff | None) -> tuple[str, ...]:
    if diff is None:
        return ()
    out = []
    for c in diff.changed:
        if c.old is None:
            out.append(f"{c.name} added ({c.new})")
        elif c.new is None:
            out.append(f"{c.name} removed ({c.old})")
        else:
            out.append(f"{c.name} {c.old} -> {c.new}")
    return tuple(out)


_SCALARS = (str, int, bool, type(None))


@lru_cache(maxsize=256)
def _field_names(cls: type) -> tuple[str, ...] | None:
    return tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None


def to_jsonable(obj: Any) -> Any:
    """Dataclasses (ours and the analysis ones) as plain JSON values, in field order.

    Dispatches on the exact type first: a large release serialises tens of thousands of values.
    """
    kind = type(obj)
    if kind is float:
        return obj if math.isfinite(obj) else None
    if kind in _SCALARS:
        return obj
    if kind is tuple or kind is list:
        return [to_jsonable(v) for v in obj]
    names = _field_names(kind)
    if names is not None:
        return {n: to_jsonable(getattr(obj, n)) for n in names}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, date):
        return obj.isoformat()
    if isinstance(obj, _SCALARS):
        return obj
    return str(obj)


def _fields_of(obj: Any) -> dict[str, Any]:
    return {n: getattr(obj, n) for n in _field_names(type(obj)) or ()}


def _json_default(obj: Any) -> Any:
    """What the json encoder cannot write itself, one level at a time (it recurses into the result)."""
    if _field_names(type(obj)) is not None:
        return _fields_of(obj)
    if isinstance(obj, Mapping):
        return {str(k): v for k, v in obj.items()}
    if isinstance(obj, date):
        return obj.isoformat()
    return str(obj)


def json_text(body: Mapping[str, Any], *, indent: int | None = None) -> str:
    """Canonical JSON text of a ``json_body()``: the same data gives the same bytes.

    Compact (``indent=None``, what the API answers): the stdlib's C encoder walks the dataclasses
    itself through ``default``, one Python call per dataclass rather than per value, about twice as
    fast as :func:`to_jsonable` first. Its text is that of ``to_jsonable(body)`` exactly; only when
    a non-finite float is present (never produced by the analysis, which maps NaN to None) does it
    fall back to that path, which writes such a float as null. Indented text goes through the
    pure-Python encoder either way, where converting first is the faster of the two.
    """
    if indent is not None:
        return json.dumps(to_jsonable(body), indent=indent, ensure_ascii=False, allow_nan=False) + "\n"
    kw: dict[str, Any] = {"separators": (",", ":"), "ensure_ascii": False, "allow_nan": False}
    try:
        return json.dumps(body, default=_json_default, **kw)
    except ValueError:
        return json.dumps(to_jsonable(body), **kw)


def dumps(obj: ReleaseComparison | RunSetComparison) -> str:
    """Canonical JSON text: the same data gives the same bytes."""
    return json_text(obj.json_body(), indent=2)


# Release order -----------------------------------------------------------------------------------


def _natural_key(tag: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p.lower()) for p in re.split(r"(\d+)", tag) if p)


def order_family(releases: Iterable[Release]) -> list[Release]:
    """Releases of one image, oldest first.

    By ``packaging.version`` when every tag parses (25.9 < 25.12 < 26.01), else by release date when
    every release has one, else by tag in natural order. One rule for the whole family keeps the
    order total: mixing rules pairwise could make A < B < C < A.
    """
    items = list(releases)

    def version(tag: str) -> Version | None:
        try:
            return Version(tag)
        except InvalidVersion:
            return None

    versions = {r.id: version(r.tag) for r in items}
    if all(v is not None for v in versions.values()):
        return sorted(items, key=lambda r: (versions[r.id], _natural_key(r.tag), r.id))
    if all(r.release_date is not None for r in items):
        return sorted(items, key=lambda r: (r.release_date, _natural_key(r.tag), r.id))
    return sorted(items, key=lambda r: (_natural_key(r.tag), r.id))


def previous_release(session: Session, release: Release) -> Release | None:
    """The release of the same image just before ``release`` (see :func:`order_family`)."""
    family = order_family(session.scalars(select(Release).where(Release.image == release.image)))
    index = next(i for i, r in enumerate(family) if r.id == release.id)
    return family[index - 1] if index > 0 else None


# Loading -----------------------------------------------------------------------------------------


@dataclass
class _Rows:
    """Runs and metric values of several releases, as loaded by one joined query."""

    # run id -> (release id, cluster id, workload id, variant id, repeat, status, failure kind)
    runs: dict[int, tuple[int, int, int, int, int, str, str | None]] = field(default_factory=dict)
    # run id -> metric -> (value, unit)
    metrics: dict[int, dict[str, tuple[float, str]]] = field(default_factory=lambda: defaultdict(dict))


def _load_rows(session: Session, release_ids: Sequence[int] = (), run_ids: Sequence[int] = ()) -> _Rows:
    query = select(
        Run.id,
        Run.release_id,
        Run.cluster_id,
        Run.workload_id,
        Run.variant_id,
        Run.repeat,
        Run.status,
        Run.failure_kind,
        RunMetric.name,
        RunMetric.value,
        RunMetric.unit,
    ).outerjoin(RunMetric, RunMetric.run_id == Run.id)
    if release_ids:
        query = query.where(Run.release_id.in_(list(release_ids)))
    else:
        query = query.where(Run.id.in_(list(run_ids)))
    rows = _Rows()
    # Core rows, not ORM entities: tens of thousands of tuples load several times faster.
    result = session.connection().execute(query).all()  # one bulk fetch, not a fetch per row
    for rid, rel, cl, wl, var, rep, status, kind, name, value, unit in result:
        rows.runs[rid] = (rel, cl, wl, var, rep, status, kind)
        if name is not None:
            rows.metrics[rid][name] = (float(value), unit)
    return rows


@dataclass
class _Catalog:
    variants: dict[int, Variant]
    workloads: dict[int, Workload]
    clusters: dict[int, Cluster]
    releases: dict[int, Release]
    # id -> name, looked up once: ORM attribute access per row costs more than the row itself.
    names: tuple[dict[int, str], dict[int, str], dict[int, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.names = (
            {i: c.name for i, c in self.clusters.items()},
            {i: w.name for i, w in self.workloads.items()},
            {i: v.name for i, v in self.variants.items()},
        )

    def cell(self, cluster_id: int, workload_id: int, variant_id: int) -> Cell | None:
        """(cluster, workload, variant) names, or None when one of the ids is not in the catalog."""
        clusters, workloads, variants = self.names
        cl, wl, var = clusters.get(cluster_id), workloads.get(workload_id), variants.get(variant_id)
        return None if cl is None or wl is None or var is None else (cl, wl, var)

    def variant_key(self, variant: Variant) -> tuple[int, int, str]:
        rank = DEFAULT_LADDER.index(variant.name) if variant.name in DEFAULT_LADDER else len(DEFAULT_LADDER)
        return (variant.position, rank, variant.name)


def _load_catalog(session: Session, rows: _Rows, releases: Iterable[Release]) -> _Catalog:
    var_ids = {r[3] for r in rows.runs.values()}
    wl_ids = {r[2] for r in rows.runs.values()}
    cl_ids = {r[1] for r in rows.runs.values()}
    variants = session.scalars(select(Variant).where(Variant.id.in_(var_ids)))
    return _Catalog(
        variants={v.id: v for v in variants},
        workloads={w.id: w for w in session.scalars(select(Workload).where(Workload.id.in_(wl_ids)))},
        clusters={c.id: c for c in session.scalars(select(Cluster).where(Cluster.id.in_(cl_ids)))},
        releases={r.id: r for r in releases},
    )


# Building ------------------------------------------------------------------------------------------

Cell = tuple[str, str, str]  # cluster, workload, variant names


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


def _method(opts: ComparisonOptions) -> MethodInfo:
    return MethodInfo(
        interval=INTERVAL_METHOD,
        confidence=opts.confidence,
        n_resamples=opts.n_resamples,
        seed=opts.seed,
        test=TEST_NAME,
        alpha=opts.alpha,
        threshold_pct=opts.threshold_pct,
        lookback=opts.lookback,
        z_threshold=opts.z_threshold,
        noisy_cv=opts.noisy_cv,
        min_n=opts.min_n,
    )


def _pick_metrics(present: Iterable[str], wanted: tuple[str, ...] | None) -> tuple[str, ...]:
    names = sorted(set(present))
    if wanted is not None:
        return tuple(dict.fromkeys(wanted))
    chosen: list[str] = []
    for group in (PRIMARY_METRICS, MEMORY_METRICS):
        first = next((m for m in group if m in names), None)
        if first:
            chosen.append(first)
    return tuple(chosen) if chosen else tuple(names)


def _values_by_release(rows: _Rows, cat: _Catalog) -> dict[int, dict[Cell, dict[str, list[float]]]]:
    """release id -> (cluster, workload, variant) -> metric -> values of the succeeded runs, in one pass."""
    out: dict[int, dict[Cell, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for rid, (rel, cl, wl, var, _rep, status, _kind) in rows.runs.items():
        if status != RunStatus.succeeded:
            continue
        by_metric = out[rel][cat.cell(cl, wl, var)]
        for name, (value, _unit) in rows.metrics.get(rid, {}).items():
            by_metric[name].append(value)
    return out


def _units(rows: _Rows) -> dict[str, str]:
    units: dict[str, str] = {}
    for rid in sorted(rows.metrics):
        for name, (_v, unit) in rows.metrics[rid].items():
            units.setdefault(name, unit)
    return units


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
    release = catalog.get_release(session, ref)
    family = order_family(session.scalars(select(Release).where(Release.image == release.image)))
    index = next(i for i, r in enumerate(family) if r.id == release.id)
    history = family[max(0, index - opts.lookback) : index] if opts.lookback > 0 else []
    if baseline_ref is not None:
        baseline: Release | None = catalog.get_release(session, baseline_ref, "baseline")
        source = "explicit"
        if baseline.id == release.id:
            raise ValidationProblem.at("baseline", "a release cannot be compared with itself")
    else:
        baseline = family[index - 1] if index > 0 else None
        source = "previous" if baseline else "none"

    ids = [release.id] + ([baseline.id] if baseline else [])
    rows = _load_rows(session, release_ids=ids)
    cat = _load_catalog(session, rows, [release, *([baseline] if baseline else []), *history])
    by_release = _values_by_release(rows, cat)
    present = {m for cell in by_release.get(release.id, {}).values() for m in cell}
    metrics = _pick_metrics(present, opts.metrics)
    by_release.update(_history_values(session, [r.id for r in history if r.id not in ids], metrics, cat))
    env_rows = session.execute(
        select(Run.id, Run.variant_id, Run.status, Run.environment, Run.provenance, Run.error).where(
            Run.release_id == release.id
        )
    ).all()
    return _assemble(release, baseline, source, history, rows, cat, env_rows, opts, by_release, metrics)


def _history_values(
    session: Session, release_ids: Sequence[int], metrics: Sequence[str], cat: _Catalog
) -> dict[int, dict[Cell, dict[str, list[float]]]]:
    """Values of the lookback releases: only succeeded runs and the analysed metrics, in one query.

    The lookback needs one median per cell and metric, so the history costs a narrow query rather
    than every run and metric (the bulk of the rows when the lookback is 5 releases).
    Cells whose cluster, workload or variant this release and its baseline do not have are left
    out: no delta reads them.
    """
    out: dict[int, dict[Cell, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    if not release_ids or not metrics:
        return out
    query = (
        select(
            Run.release_id, Run.cluster_id, Run.workload_id, Run.variant_id, RunMetric.name, RunMetric.value
        )
        .join(RunMetric, RunMetric.run_id == Run.id)
        .where(
            Run.release_id.in_(list(release_ids)),
            Run.status == RunStatus.succeeded,
            RunMetric.name.in_(list(metrics)),
        )
    )
    for rel, cl, wl, var, name, value in session.connection().execute(query).all():
        cell = cat.cell(cl, wl, var)
        if cell is not None:
            out[rel][cell][name].append(float(value))
    return out


def _assemble(
    release: Release,
    baseline: Release | None,
    source: str,
    history: Sequence[Release],
    rows: _Rows,
    cat: _Catalog,
    env_rows: Sequence[Any],
    opts: ComparisonOptions,
    by_release: Mapping[int, Mapping[Cell, Mapping[str, list[float]]]],
    metrics: tuple[str, ...],
) -> ReleaseComparison:
    missing: list[str] = []
    current_runs = {rid: r for rid, r in rows.runs.items() if r[0] == release.id}
    values = by_release.get(release.id, {})
    units = _units(rows)

    # Grid of this release: what was run (in any state), in ladder order.
    release_variants = sorted({cat.variants[r[3]] for r in current_runs.values()}, key=cat.variant_key)
    base = _baseline_variant(release_variants)
    by_name = {v.name: v for v in cat.variants.values()}
    variant_names = [v.name for v in release_variants]
    if base is not None and base not in variant_names:
        variant_names.insert(0, base)  # a ladder without its Base still shows the empty first rung
    clusters = sorted({cat.clusters[r[1]] for r in current_runs.values()}, key=lambda c: c.name)
    workloads = sorted({cat.workloads[r[2]] for r in current_runs.values()}, key=lambda w: w.name)
    grid: dict[str, list[str]] = {
        c.name: sorted({cat.workloads[r[2]].name for r in current_runs.values() if r[1] == c.id})
        for c in clusters
    }

    cells = _cells(current_runs, cat, env_rows, grid, variant_names)
    if not current_runs:
        missing.append("no runs recorded for this release")
    elif not any(c.succeeded for c in cells):
        missing.append("no succeeded runs: no statistics")
    if base is not None and current_runs and not any(c.succeeded for c in cells if c.variant == base):
        missing.append(f"no succeeded {base} runs: speed-ups over {base} cannot be computed")
    for c in cells:
        where = f"{c.variant} on {c.workload} ({c.cluster})"
        bad = len(c.not_succeeded)
        if c.succeeded == 0:
            tail = f" ({bad} not succeeded)" if bad else ""
            missing.append(f"{where}: no succeeded runs{tail}")
        else:
            if bad:
                missing.append(f"{where}: {bad} of {c.succeeded + bad} runs did not succeed")
            if c.succeeded == 1:
                missing.append(f"{where}: one repeat only: no interval, no significance test")
    for cell, by_metric in sorted(values.items()):
        for m in metrics:
            if m not in by_metric:
                missing.append(f"{cell[2]} on {cell[1]} ({cell[0]}): metric {m} not reported")

    ladders = _ladders(values, grid, variant_names, base, metrics, units, opts)
    design = _factorial_design(release_variants)
    factorials = _factorials(values, grid, design, metrics, units, opts) if design else ()
    deltas = _deltas(by_release, cat, release, baseline, history, metrics, units, opts, missing)
    diff = None
    if baseline is not None:
        diff = diff_manifests(_str_map(baseline.manifest), _str_map(release.manifest))
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
        method=_method(opts),
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
    )


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


def _str_map(m: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (m or {}).items()}


def _cells(
    current_runs: Mapping[int, tuple],
    cat: _Catalog,
    env_rows: Sequence[Any],
    grid: Mapping[str, list[str]],
    variant_names: list[str],
) -> list[CellStatus]:
    errors = {rid: err for rid, _v, _s, _e, _p, err in env_rows}
    by_cell: dict[Cell, list[tuple[int, int, str, str | None]]] = defaultdict(list)
    for rid, (_rel, cl, wl, var, rep, status, kind) in current_runs.items():
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
                inputs.append(LadderInput(rungs, metric, unit, base))
    # One batched analysis for the whole release: its bootstraps run in a few vectorised calls.
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
                    cells, metric, unit=unit, factors=design.factors, confidence=opts.confidence
                )
                out.append(FactorialEntry(cluster, workload, metric, analysis))
    return tuple(out)


def _deltas(
    by_release: Mapping[int, Mapping[Cell, Mapping[str, list[float]]]],
    cat: _Catalog,
    release: Release,
    baseline: Release | None,
    history: Sequence[Release],
    metrics: Sequence[str],
    units: Mapping[str, str],
    opts: ComparisonOptions,
    missing: list[str],
) -> tuple[ReleaseDelta, ...]:
    values = by_release.get(release.id, {})
    base_values = by_release.get(baseline.id, {}) if baseline else {}
    hist_values = [(r.ref, by_release.get(r.id, {})) for r in history]
    rank = {v.name: cat.variant_key(v) for v in cat.variants.values()}
    cells = sorted(set(values) | set(base_values), key=lambda c: (c[0], c[1], rank.get(c[2], (0, 0, c[2]))))
    rows: list[tuple[Cell, str, str, str, int | None, LookbackResult | None, tuple[HistoryPoint, ...]]] = []
    pairs: list[ReleasePair] = []
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
            result: int | None = None
            look = None
            if baseline is None:
                status = "no baseline release"
            elif not new:
                if cell not in values:
                    missing.append(
                        f"{cell[2]} on {cell[1]} ({cell[0]}): in {baseline.ref} but not in this release"
                    )
                status = "no data in this release"
            elif not old:
                status = "no baseline data"
                no_baseline_data += 1
            else:
                status = "compared"
                result = len(pairs)
                pairs.append(ReleasePair(old, new, metric, unit))
            if new and points:
                look = lookback(
                    float(statistics.median(new)),
                    [p.median for p in points],
                    opts.lookback,
                    metric=metric,
                    unit=unit,
                    z_threshold=opts.z_threshold,
                )
            if new or old:
                rows.append((cell, metric, unit, status, result, look, points))
    if baseline is not None and no_baseline_data:
        missing.append(f"{no_baseline_data} cell/metric pairs have no succeeded runs in {baseline.ref}")
    results = _regressions(pairs, opts)
    return tuple(
        ReleaseDelta(*cell, metric, unit, status, None if i is None else results[i], look, points)
        for cell, metric, unit, status, i, look, points in rows
    )


def _regressions(pairs: Sequence[ReleasePair], opts: ComparisonOptions) -> list[RegressionResult]:
    """Every release-over-release check at once: their bootstraps run batched."""
    return compare_releases_many(
        pairs,
        threshold_pct=opts.threshold_pct,
        alpha=opts.alpha,
        confidence=opts.confidence,
        n_resamples=opts.n_resamples,
        seed=opts.seed,
    )


def _run_records(rows: _Rows, cat: _Catalog, releases: Sequence[Release]) -> tuple[RunRecord, ...]:
    order = {r.id: i for i, r in enumerate(releases)}
    records = []
    for rid, (rel, cl, wl, var, rep, status, _kind) in rows.runs.items():
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


# Two sets of runs ----------------------------------------------------------------------------------


def parse_run_ids(text: str, loc: str) -> list[int]:
    """``"1,2,3"`` -> [1, 2, 3]; refuses anything but positive integers."""
    try:
        ids = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ValidationProblem.at(loc, f"expected comma-separated run ids, got {text!r}") from None
    if not ids or any(i < 1 for i in ids):
        raise ValidationProblem.at(loc, f"expected comma-separated positive run ids, got {text!r}")
    if len(ids) > 10_000:
        raise ValidationProblem.at(loc, "at most 10000 run ids")
    return sorted(set(ids))


def release_run_ids(session: Session, ref: str, loc: str) -> list[int]:
    release = catalog.get_release(session, ref, loc)
    return list(session.scalars(select(Run.id).where(Run.release_id == release.id).order_by(Run.id)))


def study_run_ids(session: Session, study_id: int, loc: str) -> list[int]:
    if session.get(Study, study_id) is None:
        raise NotFound.at(loc, f"study {study_id} does not exist")
    return list(session.scalars(select(Run.id).where(Run.study_id == study_id).order_by(Run.id)))


def compare_run_sets(
    session: Session,
    baseline_ids: Sequence[int],
    contender_ids: Sequence[int],
    *,
    baseline_label: str = "baseline",
    contender_label: str = "contender",
    options: ComparisonOptions | None = None,
) -> RunSetComparison:
    """Compare two sets of runs cell by cell (cluster, workload, variant).

    When each set holds exactly one cell they are compared with each other whatever their names
    (e.g. three runs of one variant against three of another). Otherwise cells are paired by
    equal (cluster, workload, variant); unpaired cells are listed in ``missing``. Unknown run ids
    are a 404; runs that did not succeed are left out of the statistics and listed.
    """
    opts = options or ComparisonOptions()
    ids = sorted(set(baseline_ids) | set(contender_ids))
    rows = _load_rows(session, run_ids=ids)
    unknown = sorted(set(ids) - set(rows.runs))
    if unknown:
        raise NotFound.at("runs", f"run(s) {', '.join(map(str, unknown[:20]))} do not exist")
    release_ids = sorted({r[0] for r in rows.runs.values()})
    releases = list(session.scalars(select(Release).where(Release.id.in_(release_ids))))
    cat = _load_catalog(session, rows, releases)
    missing: list[str] = []

    def side(run_ids: Sequence[int], label: str) -> tuple[RunSet, dict[Cell, dict[str, list[float]]]]:
        cells: dict[Cell, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for rid in sorted(set(run_ids)):
            _rel, cl, wl, var, _rep, status, _kind = rows.runs[rid]
            cell = (cat.clusters[cl].name, cat.workloads[wl].name, cat.variants[var].name)
            if status != RunStatus.succeeded:
                missing.append(f"{label}: run {rid} ({'/'.join(cell)}) is {status}: left out")
                continue
            for name, (value, _u) in rows.metrics.get(rid, {}).items():
                cells[cell][name].append(value)
        refs = sorted({cat.releases[rows.runs[r][0]].ref for r in run_ids})
        return RunSet(label, tuple(sorted(set(run_ids))), tuple(refs)), cells

    base_set, base_cells = side(baseline_ids, "baseline")
    cont_set, cont_cells = side(contender_ids, "contender")
    base_set = dataclasses.replace(base_set, label=baseline_label)
    cont_set = dataclasses.replace(cont_set, label=contender_label)
    present = {m for c in cont_cells.values() for m in c} & {m for c in base_cells.values() for m in c}
    metrics = _pick_metrics(present, opts.metrics)
    units = _units(rows)

    if len(base_cells) == 1 and len(cont_cells) == 1:
        pairs = [(next(iter(base_cells)), next(iter(cont_cells)))]
    else:
        pairs = [(c, c) for c in sorted(set(base_cells) & set(cont_cells))]
        for c in sorted(set(base_cells) - set(cont_cells)):
            missing.append(f"baseline cell {'/'.join(c)} has no counterpart in the contender set")
        for c in sorted(set(cont_cells) - set(base_cells)):
            missing.append(f"contender cell {'/'.join(c)} has no counterpart in the baseline set")
    if not pairs:
        missing.append("no cells to compare")

    rows: list[tuple[tuple[str, ...], str, str, str, int | None]] = []
    checks: list[ReleasePair] = []
    for b_cell, c_cell in pairs:
        label = (
            c_cell
            if b_cell == c_cell
            else tuple(x if x == y else f"{y} vs {x}" for x, y in zip(b_cell, c_cell, strict=True))
        )
        for metric in metrics:
            unit = units.get(metric) or describe_metric(metric).unit
            old = tuple(sorted(base_cells[b_cell].get(metric, ())))
            new = tuple(sorted(cont_cells[c_cell].get(metric, ())))
            if old and new:
                rows.append((label, metric, unit, "compared", len(checks)))
                checks.append(ReleasePair(old, new, metric, unit))
            else:
                status = "no baseline data" if new else "no data in this release"
                rows.append((label, metric, unit, status, None))
    results = _regressions(checks, opts)
    deltas = [
        ReleaseDelta(*label, metric, unit, status, None if i is None else results[i], None, ())
        for label, metric, unit, status, i in rows
    ]

    diff = None
    if len(base_set.releases) == 1 and len(cont_set.releases) == 1 and base_set.releases != cont_set.releases:
        by_ref = {r.ref: r for r in releases}
        diff = diff_manifests(
            _str_map(by_ref[base_set.releases[0]].manifest), _str_map(by_ref[cont_set.releases[0]].manifest)
        )
    return RunSetComparison(
        baseline=base_set,
        contender=cont_set,
        method=_method(opts),
        metrics=metrics,
        deltas=tuple(deltas),
        manifest_diff=diff,
        missing=tuple(missing),
    )
