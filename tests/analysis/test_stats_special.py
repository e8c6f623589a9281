"""The t and chi-square helpers of analysis.stats give bit for bit what scipy.stats's distributions give.

They call the scipy.special functions those distributions call underneath, to skip the objects'
per-call overhead; every interval, p-value and noisy flag must stay exactly what it was."""

from __future__ import annotations

import numpy as np
from scipy import stats

from ablate.backend.analysis.stats import chi2_quantile, t_critical, t_two_sided_p


def _dfs() -> list[float]:
    rng = np.random.default_rng(20261204)
    whole = [float(d) for d in range(1, 200)]
    fractional = rng.uniform(1.0, 400.0, 300).tolist()  # Welch-Satterthwaite df
    return whole + fractional + [1.0000001, 1e6]


def test_t_critical_equals_scipy_t_ppf() -> None:
    for df in _dfs():
        for confidence in (0.5, 0.8, 0.9, 0.95, 0.99, 0.999):
            assert t_critical(confidence, df) == float(stats.t.ppf(0.5 + confidence / 2.0, df))


def test_t_two_sided_p_equals_twice_scipy_t_sf() -> None:
    rng = np.random.default_rng(7)
    ts = [0.0, 1e-12, 0.5, 1.96, 3.0, 12.0, 40.0, 1e3, float("inf"), *rng.normal(0, 4, 100).tolist()]
    for df in _dfs()[::7]:
        for t in ts:
            assert t_two_sided_p(t, df) == float(2.0 * stats.t.sf(abs(t), df))


def test_chi2_quantile_equals_scipy_chi2_ppf() -> None:
    for df in range(1, 300):
        for q in (0.001, 0.01, 0.025, 0.05, 0.1, 0.5, 0.95):
            assert chi2_quantile(q, df) == float(stats.chi2.ppf(q, df))
