"""Pure analysis: lists of numbers in, frozen dataclasses out. No database, no plotly, no I/O."""

from ablate.backend.analysis.ablation import (
    LadderAnalysis,
    LadderOptions,
    VariantResult,
    analyze_ladder,
    speedup_of,
)
from ablate.backend.analysis.comparison import BASELINE_SPEEDUP, Comparison, compare_samples
from ablate.backend.analysis.factorial import (
    Effect,
    FactorialAnalysis,
    analyze_factorial,
    factors_from_variant,
)
from ablate.backend.analysis.manifest import ManifestDiff, PackageChange, compare_versions, diff_manifests
from ablate.backend.analysis.regression import (
    LookbackResult,
    LookbackRule,
    RegressionResult,
    compare_releases,
    compare_releases_many,
    lookback,
    lookback_many,
)
from ablate.backend.analysis.stats import Summary, bh_adjust, summarize

__all__ = [
    "BASELINE_SPEEDUP",
    "Comparison",
    "Effect",
    "FactorialAnalysis",
    "LadderAnalysis",
    "LadderOptions",
    "LookbackResult",
    "LookbackRule",
    "ManifestDiff",
    "PackageChange",
    "RegressionResult",
    "Summary",
    "VariantResult",
    "analyze_factorial",
    "analyze_ladder",
    "bh_adjust",
    "compare_releases",
    "compare_releases_many",
    "compare_samples",
    "compare_versions",
    "diff_manifests",
    "factors_from_variant",
    "lookback",
    "lookback_many",
    "speedup_of",
    "summarize",
]
