"""The between-session variance component: noise the repeats of one release cannot show.

The runs of a release share a day, nodes and a driver state: its cell's mean moves by a session
effect that its repeats all share. Release over release the two means carry two such effects, so the
difference of two cells has variance ``s_new^2 / n_new + s_old^2 / n_old + 2 tau^2``. Ignoring
``tau^2`` (a 1-2% session level) made 4-9% of unchanged comparisons false verdicts and covered 46-84%
(issue 27); more repeats made it worse, since they shrink only the within-session part.

``tau^2`` is estimated by the method of moments from sessions the service already holds: the same
cell (cluster, workload, variant, metric) in consecutive earlier releases. Each successive
difference of session means ``d = m_{j+1} - m_j`` (log scale) has ``E[d^2] = 2 tau^2 + v_j / n_j +
v_{j+1} / n_{j+1}``, so, pooled over the cells of a pool (one cluster),

    tau^2 = max(0, (sum d^2 - sum (v_j / n_j + v_{j+1} / n_{j+1})) / (2 m))

over the m differences. Successive differences, not the spread around one mean, so a slow drift
across releases barely counts; a real change between two earlier releases inflates the estimate
(the interval is then wider: conservative). Its degrees of freedom are taken as ``2 m / 3``
(adjacent differences share a session, correlation -1/2) and enter the test's Welch-Satterthwaite
df. Proven by benchmarks/stats_simulation.py (table session_noise).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

SESSION_METHOD = (
    "method of moments over successive release-to-release differences of a pool's cells (log scale)"
)
# Where the same images ran in two sessions (a same-session baseline's re-run beside the release and
# its own earlier runs), their differences are session noise alone: no change of the release in them.
RERUN_METHOD = "method of moments over reruns of the same images in two sessions (log scale)"
K = TypeVar("K")

# Below this many differences the estimate is too unstable to widen every verdict with.
MIN_DIFFERENCES = 3


@dataclass(frozen=True)
class SessionVariance:
    """Between-session variance of a cell's mean log value (``tau2``), as estimated from history."""

    tau2: float | None  # None: too few differences to estimate it
    df: float | None  # effective degrees of freedom of the estimate
    n_differences: int  # successive differences of session means used
    n_cells: int  # cells that gave at least one difference
    method: str = SESSION_METHOD

    @property
    def tau(self) -> float | None:
        """Session level as a standard deviation of log values (about the CV of a cell's mean)."""
        return None if self.tau2 is None else math.sqrt(self.tau2)


def _sessions(sessions: Sequence[Sequence[float]]) -> list[tuple[float, float] | None]:
    """(mean log, variance of the mean log) of every session; None below 2 positive values.

    Sessions of one size are one array: each row's mean and variance are the numbers numpy gives
    that row alone (the same reduction along the row), without a call per session."""
    out: list[tuple[float, float] | None] = [None] * len(sessions)
    by_size: dict[int, list[int]] = {}
    for i, values in enumerate(sessions):
        if len(values) >= 2:
            by_size.setdefault(len(values), []).append(i)
    for n, rows in by_size.items():
        arr = np.asarray([sessions[i] for i in rows], dtype=float)
        positive = np.asarray((arr > 0).all(axis=1))
        logs = np.log(arr[positive])
        means, variances = logs.mean(axis=1).tolist(), (logs.var(axis=1, ddof=1) / n).tolist()
        for i, mean, var in zip(itertools.compress(rows, list(positive)), means, variances, strict=True):
            out[i] = (mean, var)
    return out


def session_variances(pools: Mapping[K, Sequence[Sequence[Sequence[float]]]]) -> dict[K, SessionVariance]:
    """:func:`session_variance` of every pool, the sessions of all of them summarised together."""
    parts = iter(_sessions([s for cells in pools.values() for sessions in cells for s in sessions]))
    out: dict[K, SessionVariance] = {}
    for key, cells in pools.items():
        total_d2 = total_w = 0.0
        m = used_cells = 0
        for sessions in cells:
            k = 0
            for a, b in itertools.pairwise([next(parts) for _ in sessions]):
                if a is None or b is None:
                    continue
                total_d2 += (b[0] - a[0]) ** 2
                total_w += a[1] + b[1]
                m += 1
                k += 1
            used_cells += k > 0
        if m < MIN_DIFFERENCES:
            out[key] = SessionVariance(None, None, m, used_cells)
        else:
            tau2 = max(0.0, (total_d2 - total_w) / (2.0 * m))
            out[key] = SessionVariance(tau2, max(1.0, 2.0 * m / 3.0), m, used_cells)
    return out


def rerun_variances(
    pools: Mapping[K, Sequence[tuple[Sequence[float], Sequence[float]]]],
) -> dict[K, SessionVariance]:
    """tau^2 of every pool from pairs of sessions of the same images (a cell's earlier session and its
    rerun): the moments of :func:`session_variances`, one difference a pair. No change of the release
    is in these differences (between releases, whatever changed inflates the estimate), and the pairs
    share no session, so the estimate has ``m`` degrees of freedom rather than ``2 m / 3``."""
    estimates = session_variances({key: [list(pair) for pair in pairs] for key, pairs in pools.items()})
    return {
        key: replace(sv, method=RERUN_METHOD, df=None if sv.tau2 is None else float(sv.n_differences))
        for key, sv in estimates.items()
    }


def session_variance(cells: Sequence[Sequence[Sequence[float]]]) -> SessionVariance:
    """tau^2 pooled over ``cells``; each cell is its sessions in release order (oldest first), each
    session the values of one release's repeats. Sessions with fewer than two positive values are
    skipped (no within-session variance), and a difference needs two consecutive usable sessions."""
    return session_variances({0: cells})[0]
