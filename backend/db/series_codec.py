"""Packing of step series into the two blobs of a ``run_series`` row."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_STEP = np.dtype("<i8")
_VALUE = np.dtype("<f8")


def pack(steps: Sequence[int] | np.ndarray, values: Sequence[float] | np.ndarray) -> tuple[bytes, bytes]:
    s = np.asarray(steps, dtype=_STEP)
    v = np.asarray(values, dtype=_VALUE)
    if s.shape != v.shape or s.ndim != 1:
        raise ValueError(f"steps and values must be 1-d and of equal length, got {s.shape} and {v.shape}")
    return s.tobytes(), v.tobytes()


def unpack(steps: bytes, values: bytes) -> tuple[np.ndarray, np.ndarray]:
    return np.frombuffer(steps, dtype=_STEP), np.frombuffer(values, dtype=_VALUE)
