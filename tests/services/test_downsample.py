"""Min-max bucket downsampling keeps the shape: first, last, global min and max, never too many points."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ablate.backend.services.downsample import minmax_downsample


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=3000),
    max_points=st.integers(4, 500),
)
def test_properties(values: list[float], max_points: int) -> None:
    v = np.asarray(values, dtype=np.float64)
    s = np.arange(v.size, dtype=np.int64) * 10
    ds, dv = minmax_downsample(s, v, max_points)
    assert dv.size <= max_points
    assert ds[0] == s[0] and ds[-1] == s[-1]
    assert dv.min() == v.min() and dv.max() == v.max()
    assert (np.diff(ds) > 0).all()  # still in step order, each point once
    # every kept point is a real point of the series
    assert np.array_equal(dv, v[ds // 10])


def test_spike_survives() -> None:
    v = np.ones(100_000)
    v[54_321] = 50.0
    ds, dv = minmax_downsample(np.arange(v.size), v, 200)
    assert dv.size <= 200 and 54_321 in ds.tolist()


def test_small_series_untouched_and_bad_max() -> None:
    s, v = np.arange(5), np.arange(5.0)
    assert minmax_downsample(s, v, 10)[1] is v
    with pytest.raises(ValueError):
        minmax_downsample(s, v, 3)
