"""The result submission contract of ``POST /api/v1/results`` (see docs/results-contract.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, StringConstraints, Tag

from ablate.backend.schemas.catalog import ClusterDef, ReleaseCreate, VariantDef, WorkloadDef
from ablate.backend.schemas.common import (
    Float,
    Int,
    Key,
    Line,
    MetricName,
    NameOr,
    Scalar,
    Strict,
    Text,
    Timestamp,
    Unit,
)

MAX_RESULTS = 1_000
MAX_METRICS = 256
MAX_SERIES = 64
MAX_POINTS = 1_000_000


class MetricValue(Strict):
    """A metric with its unit; a bare number is enough for metrics the registry knows."""

    value: Float
    unit: Unit
    # For a custom metric whose unit does not say which way is better (e.g. "%", "count").
    better: Literal["higher", "lower"] | None = None


def _metric_tag(value: Any) -> str:
    return "with-unit" if isinstance(value, dict | MetricValue) else "number"


MetricIn = Annotated[
    Annotated[Float, Tag("number")] | Annotated[MetricValue, Tag("with-unit")],
    Discriminator(_metric_tag),
]


class SeriesIn(Strict):
    steps: Annotated[list[Int], Field(max_length=MAX_POINTS)]
    values: Annotated[list[Float], Field(max_length=MAX_POINTS)]


def _release_tag(value: Any) -> str:
    return "by-name" if isinstance(value, str) else "in-full"


class ResultIn(Strict):
    release: Annotated[
        Annotated[Line, StringConstraints(min_length=3, max_length=265), Tag("by-name")]
        | Annotated[ReleaseCreate, Tag("in-full")],
        Discriminator(_release_tag),
    ]
    cluster: NameOr[ClusterDef]
    workload: NameOr[WorkloadDef]
    variant: NameOr[VariantDef]
    repeat: Annotated[Int, Field(ge=0, le=100_000)] = 0
    status: Literal["succeeded", "failed"] = "succeeded"
    metrics: Annotated[dict[MetricName, MetricIn], Field(max_length=MAX_METRICS)] = {}
    series: Annotated[dict[MetricName, SeriesIn], Field(max_length=MAX_SERIES)] = {}
    provenance: Annotated[dict[Key, Scalar], Field(max_length=200)] = {}
    environment: Annotated[
        dict[Key, Annotated[Text, StringConstraints(max_length=4_000)]], Field(max_length=1_000)
    ] = {}
    # A process's output may hold control bytes: ingest stores them as U+FFFD rather than refusing.
    error: Annotated[str, StringConstraints(max_length=10_000)] | None = None
    failure_kind: Literal["benchmark", "infrastructure", "timeout"] | None = None
    log_tail: Annotated[str, StringConstraints(max_length=65_536)] | None = None
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None
    idempotency_key: Annotated[Line, StringConstraints(min_length=1, max_length=200)] | None = None


class ResultsBatch(Strict):
    results: Annotated[list[ResultIn], Field(min_length=1, max_length=MAX_RESULTS)]


class SubmitResponse(Strict):
    run_ids: list[int]
    created: bool
