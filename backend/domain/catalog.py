"""Catalog entries as the comparison report and the catalog API both show them.

One field list for each: the comparison's dataclasses are (or extend) these, and the API's ``*Out``
schemas list the same fields in the same order (schemas may not import the services; both may read
here), which tests/api/test_schema_fields.py checks. The order of the fields is the order of the
keys in their JSON."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReleaseHead:
    """What names a release: its id, its ref and the image it is."""

    id: int
    ref: str
    image: str
    tag: str
    platform: str


@dataclass(frozen=True)
class WorkloadInfo:
    name: str
    framework: str | None
    model: str | None
    data_parallel: int
    tensor_parallel: int
    pipeline_parallel: int
    zero_stage: int | None
    seq_len: int | None
    micro_batch: int | None
    global_batch: int | None
    precision: str | None
