"""What a comparison is: its options and its result dataclasses, which the API, the reports and the
charts read. They hold the analysis dataclasses themselves, so chart functions take them directly."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ablate.backend.analysis.ablation import SHARE_INTERVAL_METHOD, LadderAnalysis, LadderOptions
from ablate.backend.analysis.factorial import WELCH_EFFECT_METHOD, FactorialAnalysis, FactorialDesign
from ablate.backend.analysis.manifest import ManifestDiff
from ablate.backend.analysis.regression import (
    INTERVAL_METHOD,
    LOOKBACK_METHOD,
    TEST_NAME,
    LookbackRequest,
    LookbackResult,
    LookbackRule,
    RegressionResult,
    ReleasePair,
    TrendResult,
    compare_releases_many,
    lookback_many,
    trend_many,
)
from ablate.backend.analysis.stats import (
    BH_METHOD,
    MODERATED_LOG_TEST,
    NOISY_METHOD,
    SUMMARY_CI_METHOD,
)
from ablate.backend.domain.catalog import ReleaseHead, WorkloadInfo
from ablate.backend.domain.statistics import LOOKBACK_MIN_HISTORY, LOOKBACK_RELEASES, THRESHOLD_PCT
from ablate.backend.services.comparison.jsontext import fields_of, json_text, to_jsonable

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


@dataclass(frozen=True)
class ComparisonOptions(LadderOptions):
    """Thresholds and statistical settings; stored in the result so a report states its method.

    The level, the bootstrap and the noisy flag (``alpha``, ``confidence``, ``n_resamples``, ``seed``,
    ``noisy_cv``, ``min_n``) are :class:`LadderOptions`' fields: the ladders are analysed with them."""

    threshold_pct: float = THRESHOLD_PCT
    lookback: int = LOOKBACK_RELEASES
    # The lookback speaks only with this many earlier releases (2-3 gave 22-42% false alarms).
    lookback_min_history: int = LOOKBACK_MIN_HISTORY
    # None: the primary and memory metric the release has (see PRIMARY_METRICS, MEMORY_METRICS).
    metrics: tuple[str, ...] | None = None
    # Runs measured on a busy host (provenance host_busy) enter the release-over-release verdicts and
    # lookbacks only when True: by default they leave them, with a note (an A/A rerun on a loaded host
    # read "suspect regression -39 to -56%" on every rung). Ladders and summaries keep them.
    busy_hosts: bool = False
    # Each side's variance moderated toward the one its cluster and workload's cells share
    # (analysis/moderated.py): a 10% drop at n=3 as 1 of 20 found 70-81% of the time, 29-31% without.
    moderated: bool = True

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> ComparisonOptions:
        """Defaults from :class:`~ablate.backend.config.Settings` (threshold: a fraction, 0.03 = 3%)."""
        values: dict[str, Any] = {
            "threshold_pct": float(settings.regression_threshold) * 100.0,
            "alpha": float(settings.significance_alpha),
            "lookback": int(settings.lookback_releases),
            "lookback_min_history": int(settings.lookback_min_history),
            "noisy_cv": float(settings.noisy_cv),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def method_info(self) -> MethodInfo:
        return MethodInfo(
            interval=INTERVAL_METHOD,
            confidence=self.confidence,
            n_resamples=self.n_resamples,
            seed=self.seed,
            test=MODERATED_LOG_TEST if self.moderated else TEST_NAME,
            alpha=self.alpha,
            threshold_pct=self.threshold_pct,
            lookback=self.lookback,
            lookback_min_history=self.lookback_min_history,
            noisy_cv=self.noisy_cv,
            min_n=self.min_n,
        )

    def compare(self, pairs: Sequence[ReleasePair]) -> list[RegressionResult]:
        """Every baseline/contender check of one release (or run-set comparison) at once: one
        Benjamini-Hochberg family."""
        return compare_releases_many(
            pairs,
            threshold_pct=self.threshold_pct,
            alpha=self.alpha,
            confidence=self.confidence,
            moderate=self.moderated,
        )

    @property
    def ladder_options(self) -> LadderOptions:
        """How the release's ladders are analysed: the :class:`LadderOptions` fields of this object."""
        return LadderOptions(**{f.name: getattr(self, f.name) for f in fields(LadderOptions)})

    @property
    def lookback_rule(self) -> LookbackRule:
        """When the lookbacks and the trends of a release speak (the same rule for both)."""
        return LookbackRule(self.alpha, self.lookback_min_history, self.threshold_pct)

    def trends(self, requests: Sequence[LookbackRequest]) -> list[TrendResult]:
        """The drift test of every lookback request of one release: one Benjamini-Hochberg family."""
        return trend_many(requests, self.lookback, rule=self.lookback_rule)

    def lookbacks(self, requests: Sequence[LookbackRequest]) -> list[LookbackResult]:
        """Every lookback check of one release at once: one Benjamini-Hochberg family."""
        return lookback_many(requests, self.lookback, rule=self.lookback_rule)


@dataclass(frozen=True)
class ReleaseInfo(ReleaseHead):
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
    # Runs of this cell (both releases) measured on a busy host: left out of the verdict unless the
    # comparison's ``busy_hosts`` option keeps them (``busy_included``). Every verdict row shows it.
    busy_runs: int = 0
    busy_included: bool = False
    # The drift across the lookback window and this release (a slope the lookback cannot see).
    trend: TrendResult | None = None
    # This release against the oldest release of the lookback window (K back), as the pairwise test
    # (session variance included); the checks of a release are one BH family of their own.
    k_back: RegressionResult | None = None
    k_back_release: str | None = None

    @property
    def verdict(self) -> str | None:
        return self.result.verdict if self.result else None

    @property
    def suspect(self) -> bool:
        """Past the threshold, p < alpha, not confirmed by q: never counted or shown as unchanged."""
        return bool(self.result and self.result.suspect)

    @property
    def summary_verdict(self) -> str:
        """What a count of verdicts files this delta under: its verdict, "suspect" for a suspect."""
        return "suspect" if self.suspect else (self.verdict or "not compared")


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
    """Every method a comparison used, named, with its settings (docs/statistics.md has the figures)."""

    interval: str
    confidence: float
    n_resamples: int
    seed: int
    test: str
    alpha: float
    threshold_pct: float
    lookback: int
    lookback_min_history: int
    noisy_cv: float
    min_n: int
    runs_used: str = "succeeded runs only; one summary value per run and metric"
    adjustment: str = BH_METHOD
    lookback_method: str = LOOKBACK_METHOD
    summary_interval: str = SUMMARY_CI_METHOD
    noisy: str = NOISY_METHOD
    share_interval: str = SHARE_INTERVAL_METHOD
    factorial_interval: str = WELCH_EFFECT_METHOD
    not_testable: str = "a side with fewer than 2 values: no test can reach significance, no verdict"


@dataclass(frozen=True)
class ClusterLadders:
    """Which ladders a release shows of one cluster, the dashboard's and the report's one decision
    (:meth:`ReleaseComparison.cluster_ladders`): workload -> ladder of the primary and the memory metric
    (None: the release has no such metric); ``waterfalls``: each ladder is read as a ladder (its
    waterfall, its steps). A factorial design is not: its waterfall would credit each factor with its
    position in the order, so the primary metric's ``effects`` say what each is worth on its own
    (None: not a factorial, or no primary metric)."""

    primary: dict[str, LadderAnalysis] | None
    memory: dict[str, LadderAnalysis] | None
    waterfalls: bool
    effects: dict[str, FactorialAnalysis] | None


@dataclass(frozen=True)
class ReleaseComparison:
    """Everything about one release against its baseline; ``to_json_dict()`` is the API body."""

    release: ReleaseInfo
    baseline: ReleaseInfo | None
    # previous | explicit | same-session (re-run in the release's own studies) | none
    baseline_source: str
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
    # Adaptive studies of this release (repeats {min, max}): services/adaptive.py's summaries.
    adaptive: tuple[dict[str, Any], ...] = ()
    # Workloads whose rungs all moved alike (analysis/environment.py): with busy hosts, "the
    # environment moved, not the release". Said above the verdicts, not among the missing data.
    environment: tuple[str, ...] = ()

    def ladder_map(self, cluster: str, metric: str) -> dict[str, LadderAnalysis]:
        """workload -> ladder, as the chart functions take it (workload order of the release)."""
        return {e.workload: e.analysis for e in self.ladders if e.cluster == cluster and e.metric == metric}

    def repeat_map(self, cluster: str, metric: str) -> dict[str, dict[str, list[tuple[int, float]]]]:
        """workload -> variant -> (run id, value) of this release's succeeded runs: the values behind
        each rung of :meth:`ladder_map`, for the charts' points."""
        out: dict[str, dict[str, list[tuple[int, float]]]] = {}
        for r in self.runs:
            if r.release != self.release.ref or r.cluster != cluster or r.status != "succeeded":
                continue
            if metric in r.metrics:
                runs = out.setdefault(r.workload, {}).setdefault(r.variant, [])
                runs.append((r.run_id, r.metrics[metric][0]))
        return out

    def factorial_map(self, cluster: str, metric: str) -> dict[str, FactorialAnalysis]:
        """workload -> factorial analysis (workload order of the release); empty when not factorial."""
        return {
            e.workload: e.analysis for e in self.factorials if e.cluster == cluster and e.metric == metric
        }

    def cluster_ladders(self, cluster: str, workloads: Collection[str] | None = None) -> ClusterLadders:
        """What the release shows of ``cluster`` (see :class:`ClusterLadders`); ``workloads``: only those."""

        def shown(by_workload: dict[str, Any]) -> dict[str, Any]:
            return {w: a for w, a in by_workload.items() if workloads is None or w in workloads}

        primary, memory = self.primary_metric, self.memory_metric
        return ClusterLadders(
            primary=shown(self.ladder_map(cluster, primary)) if primary else None,
            memory=shown(self.ladder_map(cluster, memory)) if memory else None,
            waterfalls=self.factorial_design is None,
            effects=shown(self.factorial_map(cluster, primary))
            if self.factorial_design is not None and primary
            else None,
        )

    def verdict_counts(self, metric: str | None = None) -> dict[str, int]:
        counts = dict.fromkeys(
            ("regressed", "suspect", "improved", "unchanged", "not testable", "not compared"), 0
        )
        for d in self.deltas:
            if metric is None or d.metric == metric:
                counts[d.summary_verdict] += 1
        return counts

    @property
    def regressions(self) -> tuple[ReleaseDelta, ...]:
        return tuple(d for d in self.deltas if d.verdict == "regressed")

    @property
    def not_testable(self) -> tuple[ReleaseDelta, ...]:
        """Compared cells whose repeats are too few for any test: never reported as unchanged."""
        return tuple(d for d in self.deltas if d.verdict == "not testable")

    @property
    def suspects(self) -> tuple[str, ...]:
        """Components changed since the baseline, e.g. "vllm 0.12.0 -> 0.16.0": where to look first."""
        return suspects_of(self.manifest_diff)

    def to_json_dict(self) -> dict[str, Any]:
        return to_jsonable(self.json_body())

    def json_text(self, indent: int | None = None) -> str:
        """Canonical JSON text of :meth:`json_body`, kept on the object once made: the object is
        immutable, and a kept comparison (cache.py) answers many reads (at 10,000 cells the text takes
        longer to make than the kept build takes to find)."""
        texts: dict[int | None, str] = self.__dict__.setdefault("_texts", {})  # not a field: eq ignores it
        if indent not in texts:
            texts[indent] = json_text(self.json_body(), indent=indent, native=True)
        return texts[indent]

    def json_body(self) -> dict[str, Any]:
        """The API body before conversion: fields (still dataclasses) plus the derived summaries."""
        out = fields_of(self)
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
        out = fields_of(self)
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
