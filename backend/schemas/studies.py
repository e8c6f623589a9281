"""Study plans (what to run) and the run matrix a study reports."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from ablate.backend.schemas.catalog import ClusterDef, VariantDef, WorkloadDef
from ablate.backend.schemas.common import Int, Line, Name, NameOr, Out, ReleaseRef, Strict


class StudyPlan(Strict):
    """A release x cluster x variants x workloads x repeats plan; one run is queued per cell."""

    name: Name | None = None
    release: ReleaseRef
    cluster: NameOr[ClusterDef]
    variants: Annotated[list[NameOr[VariantDef]], Field(min_length=1, max_length=64)]
    workloads: Annotated[list[NameOr[WorkloadDef]], Field(min_length=1, max_length=64)]
    repeats: Annotated[int, Field(ge=1, le=100)] = 3
    order_seed: Annotated[Int, Field(ge=0, le=2**62)] | None = None
    created_by: Annotated[Line, StringConstraints(max_length=200)] | None = None


class StudyRunOut(Out):
    id: int
    variant: str
    workload: str
    repeat: int
    status: str
    attempt: int
    queue_order: int
    current_step: int | None
    total_steps: int | None
    progress: float | None
    latest_throughput: float | None
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None


class StudyOut(Out):
    id: int
    name: str
    status: str
    release: str
    cluster: str
    repeats: int
    order_seed: int
    variants: list[str]
    workloads: list[str]
    counts: dict[str, int]
    created_by: str | None
    created_at: datetime
    finished_at: datetime | None
    plan: dict[str, Any]
    runs: list[StudyRunOut]


class StudySummaryOut(Out):
    id: int
    name: str
    status: str
    release: str
    cluster: str
    repeats: int
    created_at: datetime
    finished_at: datetime | None
