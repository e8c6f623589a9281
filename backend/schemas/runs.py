"""Runs as the API shows them: list items, detail, series."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ablate.backend.schemas.common import Out
from ablate.backend.schemas.hygiene import AuditOut


class _RunKey(Out):
    """What a run is: the fields every view of one run starts with."""

    id: int
    study_id: int | None
    release: str
    variant: str
    workload: str
    cluster: str
    repeat: int
    status: str
    source: str
    attempt: int


class _RunProgress(Out):
    """Where a run stands, after its key (and, on the detail, its place in the queue)."""

    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    current_step: int | None
    total_steps: int | None
    progress: float | None
    latest_throughput: float | None


# Bases in this order put their fields in the answer key first, then progress (pydantic reads the
# reversed MRO), as the JSON has always listed them.
class RunItem(_RunProgress, _RunKey):
    metrics: dict[str, float]
    excluded_at: datetime | None = None  # set: left out of every analysis, for exclusion_reason
    exclusion_reason: str | None = None


class RunPage(Out):
    items: list[RunItem]
    next_cursor: str | None


class MetricOut(Out):
    name: str
    value: float
    unit: str


class SeriesSummary(Out):
    metric: str
    n_points: int
    min: float | None
    max: float | None
    last: float | None


class _QueuedRunKey(_RunKey):
    queue_order: int


class RunDetail(_RunProgress, _QueuedRunKey):
    metrics: list[MetricOut]
    series: list[SeriesSummary]
    provenance: dict[str, Any]
    environment: dict[str, Any]
    error: str | None
    failure_kind: str | None
    log_tail: str | None
    log_path: str | None
    excluded_at: datetime | None = None
    exclusion_reason: str | None = None
    exclusions: list[AuditOut] = []
    waiting: str | None = None  # a queued run that nothing will start: "waiting: no dispatcher serves ..."


class SeriesOut(Out):
    run_id: int
    metric: str
    unit: str | None
    n_points: int
    downsampled: bool
    steps: list[int]
    values: list[float]


class RunLogOut(Out):
    name: str
    # the attempt whose file this is; 0: kept before each attempt had its own log folder
    attempt: int
    node_rank: int
    rank: int | None
    host: str | None
    size: int
    url: str


class RunAttemptOut(Out):
    attempt: int  # 0: the files kept before each attempt had its own log folder
    current: bool  # the run's latest attempt: its outcome is the run's status
    # the run's status for the current attempt; "retried", "superseded" or "unknown" for earlier ones
    outcome: str
    reason: str | None
    files: list[RunLogOut]


class RunLogsOut(Out):
    items: list[RunLogOut]  # every attempt's files, oldest attempt first
    attempts: list[RunAttemptOut]
