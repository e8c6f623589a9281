"""Downsampling of step series for display: min-max buckets.

Each bucket keeps its minimum and its maximum (in step order), plus the first and last point of the
series. Spikes and dips therefore survive, which averaging or striding would hide, and the global
minimum and maximum are always present. Pure numpy, O(n).
"""

from __future__ import annotations

import numpy as np

MIN_POINTS = 4


def minmax_downsample(
    steps: np.ndarray, values: np.ndarray, max_points: int
) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` points: first, last, and each bucket's min and max."""
    if max_points < MIN_POINTS:
        raise ValueError(f"max_points must be at least {MIN_POINTS}, got {max_points}")
    n = int(values.size)
    if n <= max_points:
        return steps, values
    interior = values[1:-1]
    m = interior.size
    wanted = (max_points - 2) // 2
    size = -(-m // wanted)  # ceil
    buckets = -(-m // size)  # every bucket then holds at least one point
    pad = buckets * size - m
    lows = np.concatenate([interior, np.full(pad, np.inf)]).reshape(buckets, size)
    highs = np.concatenate([interior, np.full(pad, -np.inf)]).reshape(buckets, size)
    offsets = np.arange(buckets) * size + 1
    keep = np.sort(
        np.concatenate([np.array([0, n - 1]), offsets + lows.argmin(axis=1), offsets + highs.argmax(axis=1)])
    )
    # np.unique of a sorted array, without its hashing (a third of the cost here)
    keep = keep[np.concatenate(([True], keep[1:] != keep[:-1]))]
    return steps[keep], values[keep]


# Levels stored at ingest for long series (see RunSeriesLevel): a read of M points starts from the
# smallest level of at least M points instead of the whole series. A level is kept only for series
# at least four times its size; below that reading the full series costs about as much.
PYRAMID_LEVELS = (1_024, 8_192, 65_536)
PYRAMID_FACTOR = 4


def pyramid_levels(n_points: int) -> tuple[int, ...]:
    """The level sizes stored for a series of ``n_points``."""
    return tuple(level for level in PYRAMID_LEVELS if n_points >= PYRAMID_FACTOR * level)
