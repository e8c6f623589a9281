"""States of runs and studies, and the kinds of hardware a cluster can have."""

from __future__ import annotations

import enum
from typing import Literal


class Platform(enum.StrEnum):
    """What a release image is built for."""

    gpu = "gpu"
    ppu = "ppu"
    cpu = "cpu"  # a release benchmarked on CPUs only (the demo, the examples, a CPU image)


class Accelerator(enum.StrEnum):
    """What a cluster's devices are (``cpu`` runs use no device)."""

    gpu = "gpu"
    ppu = "ppu"
    cpu = "cpu"


class RunStatus(enum.StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


class RunSource(enum.StrEnum):
    """Who produced a run: the dispatcher (a study's run) or CI (submitted results)."""

    scheduled = "scheduled"
    ci = "ci"


class StudyStatus(enum.StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


# A run or study in one of these states never changes again (studies use the same three names).
TERMINAL_STATES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})

# How a run failed: the benchmark's own fault (bad config, exception, no metrics), the
# infrastructure's (signal, OOM kill, unreachable peers, lost node), or its time limit.
FailureKind = Literal["benchmark", "infrastructure", "timeout"]


def is_terminal(status: str) -> bool:
    """Whether a run or study in ``status`` is finished for good."""
    return str(status) in TERMINAL_STATES
