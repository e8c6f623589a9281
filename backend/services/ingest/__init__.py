"""Storing a run's result: the one code path behind ``POST /api/v1/results`` and the Ray dispatcher.

Both paths hand over the same in-memory result, :class:`~ablate.backend.domain.runner.RunResult`: the
dispatcher gets it from a runner, :func:`submit_results` builds it from each CI result
(:func:`result_from_ci`). :func:`prepare_rows` validates it once (metric registry, finiteness, series
shape) into typed rows, and :func:`write_rows` inserts them with one statement per table.
:func:`record_run_results` finishes a batch of scheduled runs (:func:`record_run_result` is its batch
of one). Summary metrics become one ``run_metrics`` row each; series are packed into two blobs per
(run, metric) with their min/max/last. Everything happens in the caller's transaction: a batch with
one bad result stores nothing.

The parts: :mod:`.rows` (validation and bulk writes), :mod:`.record` (scheduled runs),
:mod:`.ci` (CI batches) and :mod:`.catalog_ids` (the per-process catalog id cache).
"""

from ablate.backend.services.ingest.catalog_ids import CatalogIds, _CatalogLookup, catalog_ids
from ablate.backend.services.ingest.ci import (
    SubmitOutcome,
    result_from_ci,
    result_keys,
    submit_results,
    submit_results_retrying,
)
from ablate.backend.services.ingest.record import (
    FinishedRun,
    HeldRun,
    InvalidResults,
    record_run_result,
    record_run_results,
)
from ablate.backend.services.ingest.rows import (
    THROUGHPUT,
    LevelRow,
    MetricRow,
    Rows,
    SeriesRow,
    check_directions,
    prepare_rows,
    write_rows,
)

__all__ = [
    "THROUGHPUT",
    "CatalogIds",
    "FinishedRun",
    "HeldRun",
    "InvalidResults",
    "LevelRow",
    "MetricRow",
    "Rows",
    "SeriesRow",
    "SubmitOutcome",
    "_CatalogLookup",
    "catalog_ids",
    "check_directions",
    "prepare_rows",
    "record_run_result",
    "record_run_results",
    "result_from_ci",
    "result_keys",
    "submit_results",
    "submit_results_retrying",
    "write_rows",
]
