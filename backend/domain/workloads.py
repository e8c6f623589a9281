"""What a workload is, as the comparison report and the catalog API both show it.

One field list for both: the comparison's ``WorkloadInfo`` is this dataclass, and the API's
``WorkloadOut`` builds its fields from it (schemas may not import the services, both may read here).
The order of the fields is the order of the keys in their JSON."""

from __future__ import annotations

from dataclasses import dataclass


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
