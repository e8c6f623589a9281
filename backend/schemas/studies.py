"""Study plans (what to run) and the run matrix a study reports."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    Field,
    PlainSerializer,
    PlainValidator,
    StringConstraints,
    ValidationError,
    model_validator,
)

from ablate.backend.schemas.catalog import ClusterDef, VariantDef, WorkloadDef
from ablate.backend.schemas.common import Int, Line, Name, NameOr, Out, ReleaseRef, Strict
from ablate.backend.schemas.sweeps import Sweep, expand_ckpt_layers

RECOMMENDED_REPEATS = 5


def few_repeats_warning(repeats: int) -> str:
    # Figures from benchmarks/stats_simulation.py (family_power, seed 0, 4,000 trials): the release's
    # own test (BH over its comparisons, moderated t), not Welch alone.
    return (
        f"repeats={repeats} is below {RECOMMENDED_REPEATS}: a 5% change at 2% noise is found 55% of the "
        "time at 3 repeats when it is the release's only comparison and 36% when it is 1 of 20 (the "
        "release's other cells and metrics share the adjustment; at 5 repeats: 90% and 72%, at 10: 99% "
        "and 98%), no rung can be called clean of noise, and fewer than 2 repeats give no verdict at all"
    )


class AdaptiveRepeats(Strict):
    """``repeats: {min, max}``: run ``min`` rounds, then one more round at a time for the rungs whose
    comparisons are not decided yet, up to ``max`` (backend/analysis/sequential.py)."""

    min: Annotated[Int, Field(ge=2, le=100)]
    max: Annotated[Int, Field(ge=2, le=100)]

    @model_validator(mode="after")
    def _ordered(self) -> AdaptiveRepeats:
        if self.min > self.max:
            raise ValueError(f"repeats.min ({self.min}) is above repeats.max ({self.max})")
        return self


def _repeats(value: Any) -> int | AdaptiveRepeats:
    """One error that names the field, where a plain union reports a failure per member."""
    if isinstance(value, AdaptiveRepeats):
        return value
    if isinstance(value, dict):
        try:
            return AdaptiveRepeats.model_validate(value)
        except ValidationError as exc:
            problems = "; ".join(
                ".".join(["repeats", *map(str, e["loc"])]) + ": " + e["msg"].removeprefix("Value error, ")
                for e in exc.errors()
            )
            raise ValueError(problems) from None
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= 100:
            raise ValueError(f"repeats must be 1 to 100, got {value}")
        return value
    raise ValueError("repeats must be an integer (a fixed count) or {min, max} (adaptive)")


def _repeats_out(value: int | AdaptiveRepeats) -> int | dict[str, int]:
    return value.model_dump() if isinstance(value, AdaptiveRepeats) else value


class StudyPlan(Strict):
    """A release x cluster x variants x workloads x repeats plan; one run is queued per cell."""

    name: Name | None = None
    release: ReleaseRef
    # A release to re-run beside this one in the same session (its runs interleaved with the release's
    # own on the same nodes, each rung in the baseline's image): the release-over-release verdict then
    # compares the two without the day-to-day and node-to-node drift between sessions.
    baseline: ReleaseRef | None = None
    cluster: NameOr[ClusterDef]
    variants: Annotated[list[NameOr[VariantDef]], Field(min_length=1, max_length=64)]
    workloads: Annotated[list[NameOr[WorkloadDef]], Field(min_length=1, max_length=64)]
    # 5: the smallest count at which the statistics meet their targets (docs/statistics.md: >= 80%
    # power for a 5% drop at CV 2%, and a CV below ~2% can be called clean).
    # An integer is a fixed count; {min, max} is adaptive (AdaptiveRepeats).
    repeats: Annotated[
        int | AdaptiveRepeats,
        PlainValidator(_repeats, json_schema_input_type=int | AdaptiveRepeats),
        PlainSerializer(_repeats_out),
    ] = RECOMMENDED_REPEATS
    order_seed: Annotated[Int, Field(ge=0, le=2**62)] | None = None
    created_by: Annotated[Line, StringConstraints(max_length=200)] | None = None
    # Expanded into the variants on validation (and then cleared), so the stored plan lists what runs.
    sweep: Sweep | None = None

    @model_validator(mode="after")
    def _expand_sweep(self) -> StudyPlan:
        if self.sweep is not None:
            self.variants = expand_ckpt_layers(list(self.variants), self.sweep.ckpt_layers)
            self.sweep = None
        return self

    @property
    def max_repeats(self) -> int:
        """The most runs a cell may get (the fixed count, or the adaptive max)."""
        return self.repeats.max if isinstance(self.repeats, AdaptiveRepeats) else self.repeats

    @property
    def first_rounds(self) -> int:
        """Rounds queued when the study is made (an adaptive plan queues the rest round by round)."""
        return self.repeats.min if isinstance(self.repeats, AdaptiveRepeats) else self.repeats

    def advisories(self) -> list[str]:
        """Warnings about an accepted plan: what it will not be able to show."""
        # An adaptive plan runs on to its max where the verdict needs it: no fixed count to warn of.
        if isinstance(self.repeats, int) and self.repeats < RECOMMENDED_REPEATS:
            return [few_repeats_warning(self.repeats)]
        return []


class StudyRunOut(Out):
    id: int
    release: str | None = None  # the release it measures (a plan's baseline runs name the baseline)
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
    failure_kind: str | None = None
    excluded_at: datetime | None = None  # set: left out of every analysis, for exclusion_reason
    exclusion_reason: str | None = None


class _StudyKey(Out):
    """What a study is, first in both its views."""

    id: int
    name: str
    status: str
    release: str
    cluster: str
    repeats: int


class StudyOut(_StudyKey):
    order_seed: int
    variants: list[str]
    workloads: list[str]
    counts: dict[str, int]
    created_by: str | None
    created_at: datetime
    finished_at: datetime | None
    plan: dict[str, Any]
    runs: list[StudyRunOut]
    # Its queued (or running) runs wait for nothing: "waiting: no dispatcher serves cluster 'x' (last seen
    # 12 min ago)"
    waiting: str | None = None
    # On creation: what the accepted plan will not be able to show (e.g. too few repeats).
    warnings: list[str] = []
    # repeats {min, max}: per comparison decided at n or inconclusive, and the runs saved (adaptive.py).
    adaptive: dict[str, Any] | None = None


class StudySummaryOut(_StudyKey):
    created_at: datetime
    finished_at: datetime | None
