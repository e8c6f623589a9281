"""Catalog entries: releases, variants (ladder steps), workloads and clusters."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from ablate.backend.domain.runner import DEFAULT_RUNNER, LAUNCH_MODES
from ablate.backend.schemas.common import (
    Float,
    FreeDict,
    Int,
    IsoDate,
    Key,
    Line,
    LongText,
    Name,
    Out,
    ShortText,
    Strict,
)
from ablate.backend.schemas.common import Text as FreeText
from ablate.workers.containers import ContainerConfig

Text = Annotated[FreeText, StringConstraints(max_length=5_000)]
NoteList = Annotated[list[Text], Field(max_length=500)]
# Component versions are text end to end: 2.10 as a number would be 2.1 before anyone saw it.
Version = Annotated[Line, StringConstraints(min_length=1, max_length=200)]
Manifest = Annotated[dict[Key, Version], Field(max_length=500)]
EnvName = Annotated[str, StringConstraints(max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
# A registry host with an optional namespace, e.g. "registry.example.com/acs" (no scheme, no tag).
Registry = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=500,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9.\-]*(:[0-9]{1,5})?(/[a-z0-9][a-z0-9._\-/]*)?$",
    ),
]


def _check_launch(options: dict[str, Any]) -> dict[str, Any]:
    """``runner_options.launch`` (the command runner's launch, see docs/runners.md) is one of LAUNCH_MODES."""
    launch = options.get("launch")
    if launch is not None and launch not in LAUNCH_MODES:
        raise ValueError(f"runner_options.launch must be one of {', '.join(LAUNCH_MODES)}, not {launch!r}")
    return options


class ReleaseNotes(Strict):
    features: NoteList = []
    fixes: NoteList = []
    known_issues: NoteList = []
    environment_rules: Annotated[list[Text | FreeDict], Field(max_length=500)] = []


class ReleaseCreate(Strict):
    image: Annotated[Line, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\s]+$")]
    tag: Annotated[Line, StringConstraints(min_length=1, max_length=64, pattern=r"^[^\s:/]+$")]
    platform: Literal["gpu", "ppu", "cpu"]
    release_date: IsoDate | None = None
    manifest: Manifest = {}
    driver_requirements: FreeDict = {}
    notes: ReleaseNotes = ReleaseNotes()
    # Where the release's images come from: a run with no image of its own pulls
    # "<image_registry>/<image>:<tag>" on a cluster with a container runtime.
    image_registry: Registry | None = None


class ReleaseUpdate(Strict):
    release_date: IsoDate | None = None
    manifest: Manifest | None = None
    driver_requirements: FreeDict | None = None
    notes: ReleaseNotes | None = None
    image_registry: Registry | None = None


class ReleaseOut(Out):
    # What names a release: ReleaseHead's fields, in its order (the comparison's ReleaseInfo extends
    # it); tests/api/test_schema_fields.py fails when the two lists part.
    id: int
    ref: str
    image: str
    tag: str
    platform: str
    release_date: date | None
    manifest: dict[str, Any]
    driver_requirements: dict[str, Any]
    notes: dict[str, Any]
    image_registry: str | None = None
    created_at: datetime


class VariantDef(Strict):
    name: Name
    position: Annotated[Int, Field(ge=0, le=10_000)] = 0
    factors: Annotated[
        list[Annotated[Line, StringConstraints(min_length=1, max_length=64)]], Field(max_length=64)
    ] = []
    env: Annotated[
        dict[Key, Annotated[FreeText, StringConstraints(max_length=4_000)]], Field(max_length=500)
    ] = {}
    image: Annotated[Line, StringConstraints(max_length=500)] | None = None
    runner_options: FreeDict = {}
    description: LongText | None = None

    _launch = field_validator("runner_options")(_check_launch)


class VariantOut(Out):
    id: int
    name: str
    position: int
    factors: list[str]
    env: dict[str, Any]
    image: str | None
    runner_options: dict[str, Any]
    description: str | None
    created_at: datetime


Parallel = Annotated[Int, Field(ge=1, le=1_000_000)]
Count = Annotated[Int, Field(ge=0, le=1_000_000_000)]


class WorkloadDef(Strict):
    name: Name
    framework: ShortText | None = None
    model: Name | None = None
    data_parallel: Parallel = 1
    tensor_parallel: Parallel = 1
    pipeline_parallel: Parallel = 1
    zero_stage: Annotated[Int, Field(ge=0, le=3)] | None = None
    seq_len: Count | None = None
    micro_batch: Count | None = None
    global_batch: Count | None = None
    precision: Annotated[Line, StringConstraints(max_length=16)] | None = None
    warmup_steps: Count = 0
    measured_steps: Count | None = None
    runner: ShortText | None = None
    runner_options: FreeDict = {}
    parser: ShortText | None = None

    _launch = field_validator("runner_options")(_check_launch)

    @model_validator(mode="after")
    def _launch_is_the_command_runner_s(self) -> WorkloadDef:
        launch = self.runner_options.get("launch")
        runner = self.runner or DEFAULT_RUNNER
        if launch == "per-node" and runner != "command":
            raise ValueError(
                "runner_options.launch: per-node is the command runner's; "
                f"runner {runner!r} starts one process per device itself"
            )
        return self


class _Row(Out):
    id: int


class WorkloadOut(_Row):
    # What the comparison report shows of a workload: WorkloadInfo's fields, in its order
    # (tests/api/test_schema_fields.py fails when the two lists part).
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
    warmup_steps: int
    measured_steps: int | None
    runner: str | None
    runner_options: dict[str, Any]
    parser: str | None
    created_at: datetime


class ClusterDef(Strict):
    name: Name
    accelerator: Literal["gpu", "ppu", "cpu"]
    device_model: Name | None = None
    nodes: Annotated[Int, Field(ge=1, le=100_000)] = 1
    devices_per_node: Annotated[Int, Field(ge=0, le=1_024)] = 1
    peak_tflops_per_device: Annotated[Float, Field(gt=0, le=1e9)] | None = None
    # Memory of one device in GiB: the checkpointing advisor's budget (not a label: labels select nodes).
    device_memory_gib: Annotated[Float, Field(gt=0, le=1e6)] | None = None
    interconnect: ShortText | None = None
    ray_address: Annotated[Line, StringConstraints(max_length=500)] | None = None
    resource_name: ShortText | None = None
    labels: Annotated[
        dict[Key, Annotated[Line, StringConstraints(max_length=500)]], Field(max_length=100)
    ] = {}
    # e.g. CUDA_VISIBLE_DEVICES (the default on gpu and ppu), or the variable a PPU stack reads
    visible_devices_env: EnvName | None = None
    # How runs with an image execute on this cluster's nodes: {runtime: podman | docker, options, mounts,
    # pull, pull_timeout_s, device_files, python} (see docs/deployment.md); none: on the host.
    container: FreeDict | None = None

    @field_validator("container")
    @classmethod
    def _container_is_valid(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else ContainerConfig.parse(value).to_dict()

    @model_validator(mode="after")
    def _devices_env_needs_devices(self) -> ClusterDef:
        if self.visible_devices_env and self.accelerator == "cpu":
            raise ValueError(
                "visible_devices_env names the devices of a gpu or ppu cluster; a cpu cluster has none"
            )
        return self


class ClusterOut(Out):
    id: int
    name: str
    accelerator: str
    device_model: str | None
    nodes: int
    devices_per_node: int
    peak_tflops_per_device: float | None
    device_memory_gib: float | None = None
    interconnect: str | None
    ray_address: str | None
    resource_name: str | None
    labels: dict[str, Any]
    visible_devices_env: str | None
    container: dict[str, Any] | None = None
    created_at: datetime
