"""The result submission contract of ``POST /api/v1/results`` (see docs/results-contract.md)."""

from __future__ import annotations

from array import array
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Discriminator, Field, StringConstraints, Tag, ValidatorFunctionWrapHandler, WrapValidator

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
MAX_REPEAT = 100_000


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


def _packed(items: list[Any], code: str, dtype: type[np.generic]) -> np.ndarray | None:
    """``items`` as a numpy array of ``dtype`` when every element is exactly what the schema takes there,
    else None. ``array(code, items)`` converts in C and refuses what is not a number (``"q"``: not an
    int, or beyond 64 bits; ``"d"``: not an int or float, or an int beyond a float); a bool is an int
    to it and becomes 0 or 1, so only the elements that came out 0 or 1 have their type looked at
    (steps usually hold one or two such, values seldom), instead of every element's."""
    try:
        packed = np.frombuffer(array(code, items), dtype=dtype)
    except (TypeError, OverflowError):
        return None
    for i in np.flatnonzero((packed == 0) | (packed == 1)).tolist():
        if type(items[i]) is bool:
            return None
    return packed


def compact_series(obj: dict[str, Any]) -> dict[str, Any]:
    """``object_hook`` of ``json.loads`` for result batches: a ``{"steps": [...], "values": [...]}``
    object of plain JSON numbers becomes two numpy arrays the moment it is parsed, so a large body
    never holds all its points as Python objects at once (about 60 bytes a point, the arrays 16).
    Anything else (a string among the steps, a flag among the values, a step beyond 64 bits) stays as
    parsed, for the schema to refuse with its usual message."""
    steps, values = obj.get("steps"), obj.get("values")
    if len(obj) != 2 or type(steps) is not list or type(values) is not list:
        return obj
    packed_steps = _packed(steps, "q", np.int64)
    if packed_steps is None:
        return obj
    packed = _packed(values, "d", np.float64)
    if packed is None or not np.isfinite(packed).all():  # NaN, Infinity, 1e400: the schema names the point
        return obj
    return {"steps": packed_steps, "values": packed}


def _packed_or_list(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    # Arrays come from compact_series, which checked every element's JSON type already.
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or value.size > MAX_POINTS:
            raise ValueError(f"at most {MAX_POINTS} points per series")
        return value
    return handler(value)


class SeriesIn(Strict):
    """A step series: lists (or, from the results route's parser, the same as numpy arrays)."""

    steps: Annotated[list[Int], Field(max_length=MAX_POINTS), WrapValidator(_packed_or_list)]
    values: Annotated[list[Float], Field(max_length=MAX_POINTS), WrapValidator(_packed_or_list)]


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
    # None: the server gives the next free repeat of the cell (one past its highest CI repeat).
    repeat: Annotated[Int, Field(ge=0, le=MAX_REPEAT)] | None = None
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
