"""Shared test helpers for the analysis suite."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from scipy import stats

N_RESAMPLES = 499  # small: the suite must stay fast on 2 cores


def assert_no_nan(obj: Any) -> None:
    """No NaN or inf anywhere in a (nested) dataclass result."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            assert_no_nan(getattr(obj, f.name))
    elif isinstance(obj, tuple | list):
        for x in obj:
            assert_no_nan(x)
    elif isinstance(obj, float):
        assert math.isfinite(obj), obj
    elif obj is not None and not isinstance(obj, str | bool | int):
        raise AssertionError(f"unexpected type leaks out: {type(obj)!r}")


def scipy_ci(samples, statistic, *, seed=0, n_resamples=N_RESAMPLES, confidence=0.95):
    """The same percentile bootstrap, recomputed directly with scipy on sorted inputs."""
    data = tuple(np.sort(np.asarray(s, dtype=float)) for s in samples)
    res = stats.bootstrap(
        data,
        statistic,
        n_resamples=n_resamples,
        paired=False,
        vectorized=True,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)
