"""The statistical defaults of every comparison: one home for each, which the analysis's options and
rules, the comparison's options and the settings (``ABLATE_*``) all read. docs/statistics.md gives
the reasons behind the numbers."""

from __future__ import annotations

# The level every test's (Benjamini-Hochberg adjusted) q must stay below for a verdict.
ALPHA = 0.05
# The confidence of every interval: a summary's, a comparison's, a share's.
CONFIDENCE = 0.95
# Draws of the parametric bootstrap of contribution shares (analysis/ablation.py): the Monte-Carlo
# error of a 2.5% tail point is sqrt(0.025 * 0.975 / 2000) = 0.35 percentage points of probability.
N_RESAMPLES = 2000
# The bootstrap's seed stays fixed: the same data gives the same interval.
SEED = 0
# A summary is flagged noisy above this coefficient of variation (the upper end of its interval) ...
NOISY_CV = 0.05
# ... or with fewer values than this.
MIN_N = 3
# The smallest change, in percent, a release-over-release verdict calls regressed or improved.
THRESHOLD_PCT = 3.0
# Earlier releases the lookback prediction interval compares against (K) ...
LOOKBACK_RELEASES = 5
# ... and how many of them need data before it speaks (2-3 gave 22-42% false alarms).
LOOKBACK_MIN_HISTORY = 4
