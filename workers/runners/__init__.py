"""Runners execute one benchmark run and return a RunResult; see :mod:`ablate.workers.runners.base`."""

from ablate.workers.runners.base import (
    METRIC_UNITS,
    ProgressCallback,
    Runner,
    RunResult,
    RunSpec,
    check_spec_factors,
    get_runner,
    known_runners,
    register_runner,
)

__all__ = [
    "METRIC_UNITS",
    "ProgressCallback",
    "RunResult",
    "RunSpec",
    "Runner",
    "check_spec_factors",
    "get_runner",
    "known_runners",
    "register_runner",
]
