"""The data model: catalog (releases, variants, workloads, clusters), studies, runs and their metrics."""

from __future__ import annotations

import enum
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Date,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ablate.backend.db.base import Base, UTCDateTime, utcnow
from ablate.backend.domain.states import Accelerator, Platform, RunSource, RunStatus, StudyStatus

NAME = 200  # bound on every human-given name


class TokenScope(enum.StrEnum):
    read = "read"
    submit = "submit"
    admin = "admin"


def _in(column: str, values: type[enum.StrEnum]) -> str:
    return f"{column} IN ({', '.join(repr(v.value) for v in values)})"


def _created() -> Mapped[datetime]:
    return mapped_column(UTCDateTime(), default=utcnow, nullable=False)


class Release(Base):
    __tablename__ = "releases"
    __table_args__ = (
        UniqueConstraint("image", "tag"),
        CheckConstraint(_in("platform", Platform), name="platform"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    image: Mapped[str] = mapped_column(String(NAME), index=True)
    tag: Mapped[str] = mapped_column(String(64))
    platform: Mapped[str] = mapped_column(String(8))
    release_date: Mapped[date | None] = mapped_column(Date, nullable=True)
    # component -> version, e.g. {"torch": "2.9.0", "vllm": "0.12.0"}
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # e.g. {"cuda_13.0": {"driver": ">=580"}, "ppu_driver": ">=1.1.0"}
    driver_requirements: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # {"features": [...], "fixes": [...], "known_issues": [...], "environment_rules": [...]}
    notes: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Where the release's images are pulled from, e.g. "registry.example.com/acs": a run of this
    # release with no image of its own runs in "<registry>/<image>:<tag>".
    image_registry: Mapped[str | None] = mapped_column(String(500), nullable=True)
    created_at: Mapped[datetime] = _created()

    @property
    def ref(self) -> str:
        return f"{self.image}:{self.tag}"


class Variant(Base):
    __tablename__ = "variants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME), unique=True)
    position: Mapped[int] = mapped_column(Integer, default=0)
    factors: Mapped[list[Any]] = mapped_column(JSON, default=list)  # sorted factor names switched on
    env: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    image: Mapped[str | None] = mapped_column(String(500), nullable=True)
    runner_options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    description: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = _created()


class Workload(Base):
    __tablename__ = "workloads"
    __table_args__ = (
        CheckConstraint(
            "data_parallel >= 1 AND tensor_parallel >= 1 AND pipeline_parallel >= 1", name="parallel"
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME), unique=True)
    framework: Mapped[str | None] = mapped_column(String(64), nullable=True)
    model: Mapped[str | None] = mapped_column(String(NAME), nullable=True)
    data_parallel: Mapped[int] = mapped_column(Integer, default=1)
    tensor_parallel: Mapped[int] = mapped_column(Integer, default=1)
    pipeline_parallel: Mapped[int] = mapped_column(Integer, default=1)
    zero_stage: Mapped[int | None] = mapped_column(Integer, nullable=True)
    seq_len: Mapped[int | None] = mapped_column(Integer, nullable=True)
    micro_batch: Mapped[int | None] = mapped_column(Integer, nullable=True)
    global_batch: Mapped[int | None] = mapped_column(Integer, nullable=True)
    precision: Mapped[str | None] = mapped_column(String(16), nullable=True)
    warmup_steps: Mapped[int] = mapped_column(Integer, default=0)
    measured_steps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    runner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    runner_options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    parser: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = _created()


class Cluster(Base):
    __tablename__ = "clusters"
    __table_args__ = (
        CheckConstraint(_in("accelerator", Accelerator), name="accelerator"),
        CheckConstraint("nodes >= 1 AND devices_per_node >= 0", name="size"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME), unique=True)
    accelerator: Mapped[str] = mapped_column(String(8))
    device_model: Mapped[str | None] = mapped_column(String(NAME), nullable=True)
    nodes: Mapped[int] = mapped_column(Integer, default=1)
    devices_per_node: Mapped[int] = mapped_column(Integer, default=1)
    peak_tflops_per_device: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Memory of one device in GiB (the advisor's budget); None: known from device_model, or asked for.
    device_memory_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    interconnect: Mapped[str | None] = mapped_column(String(64), nullable=True)
    ray_address: Mapped[str | None] = mapped_column(String(500), nullable=True)
    # Ray resource that reaches the devices: "GPU", a custom "PPU", or None for CPU only.
    resource_name: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Ray node labels selecting the pool, e.g. {"pool": "ppu"}.
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # The variable naming a run's devices on a node; None: CUDA_VISIBLE_DEVICES (gpu/ppu clusters).
    visible_devices_env: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # How a run with an image runs on a node: {"runtime": "podman"|"docker", "options": [...],
    # "mounts": [...], ...}; None: processes on the host (see workers/containers).
    container: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = _created()


class Study(Base):
    __tablename__ = "studies"
    __table_args__ = (
        CheckConstraint(_in("status", StudyStatus), name="status"),
        CheckConstraint("repeats >= 1", name="repeats"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME))
    release_id: Mapped[int] = mapped_column(ForeignKey("releases.id", ondelete="CASCADE"), index=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("clusters.id"), index=True)
    repeats: Mapped[int] = mapped_column(Integer)
    # the submitted plan as given: variants, workloads, order, seed
    plan: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    order_seed: Mapped[int] = mapped_column(BigInteger, default=0)
    status: Mapped[str] = mapped_column(String(16), default=StudyStatus.queued.value, index=True)
    created_by: Mapped[str | None] = mapped_column(String(NAME), nullable=True)
    created_at: Mapped[datetime] = _created()
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    release: Mapped[Release] = relationship()
    cluster: Mapped[Cluster] = relationship()
    runs: Mapped[list[Run]] = relationship(back_populates="study", order_by="Run.queue_order")


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        CheckConstraint(_in("status", RunStatus), name="status"),
        CheckConstraint(_in("source", RunSource), name="source"),
        CheckConstraint("repeat >= 0 AND attempt >= 1", name="counts"),
        # the dispatcher's claim query: oldest queued first
        Index("ix_runs_status_queue_order", "status", "queue_order"),
        # the comparison query: one release, grouped by cell
        Index("ix_runs_release_cell", "release_id", "cluster_id", "workload_id", "variant_id"),
        # A CI result is stored once per cell and repeat (services/ingest.py numbers and refuses).
        Index(
            "uq_runs_ci_cell_repeat",
            "release_id",
            "cluster_id",
            "workload_id",
            "variant_id",
            "repeat",
            unique=True,
            sqlite_where=text("source = 'ci'"),
            postgresql_where=text("source = 'ci'"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int | None] = mapped_column(
        ForeignKey("studies.id", ondelete="CASCADE"), nullable=True, index=True
    )
    release_id: Mapped[int] = mapped_column(ForeignKey("releases.id", ondelete="CASCADE"))
    variant_id: Mapped[int] = mapped_column(ForeignKey("variants.id"), index=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"), index=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("clusters.id"), index=True)
    repeat: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(16), default=RunStatus.queued.value)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    source: Mapped[str] = mapped_column(String(16), default=RunSource.scheduled.value)
    idempotency_key: Mapped[str | None] = mapped_column(String(300), unique=True, nullable=True)
    queue_order: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = _created()
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)
    provenance: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    environment: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    failure_kind: Mapped[str | None] = mapped_column(String(32), nullable=True)
    log_tail: Mapped[str | None] = mapped_column(Text, nullable=True)
    log_path: Mapped[str | None] = mapped_column(String(1000), nullable=True)
    lease_owner: Mapped[str | None] = mapped_column(String(NAME), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    current_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    total_steps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    latest_throughput: Mapped[float | None] = mapped_column(Float, nullable=True)
    # A queued run waiting for devices: since when nothing it waits on progressed (no live run holds
    # what it needs); None while live runs hold them. The reason it waits is in ``error``.
    waiting_since: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # Set by an admin's exclusion (services/hygiene.py): the run stays listed, but no analysis reads it.
    excluded_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    exclusion_reason: Mapped[str | None] = mapped_column(Text, nullable=True)

    study: Mapped[Study | None] = relationship(back_populates="runs")
    release: Mapped[Release] = relationship()
    variant: Mapped[Variant] = relationship()
    workload: Mapped[Workload] = relationship()
    cluster: Mapped[Cluster] = relationship()
    metrics: Mapped[list[RunMetric]] = relationship(
        back_populates="run", cascade="all, delete-orphan", order_by="RunMetric.name"
    )
    series: Mapped[list[RunSeries]] = relationship(
        back_populates="run", cascade="all, delete-orphan", order_by="RunSeries.metric"
    )


class RunMetric(Base):
    """One summary value per (run, metric): what lists and comparisons read, never the series."""

    __tablename__ = "run_metrics"
    __table_args__ = (
        UniqueConstraint("run_id", "name"),
        Index("ix_run_metrics_name", "name"),
        CheckConstraint("better IS NULL OR better IN ('higher', 'lower')", name="better"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(NAME))
    value: Mapped[float] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(32))
    # A custom metric's direction as decided at ingest (stated, or read from its unit); NULL for
    # registered metrics, whose direction the registry fixes.
    better: Mapped[str | None] = mapped_column(String(8), nullable=True)

    run: Mapped[Run] = relationship(back_populates="metrics")


class RunSeries(Base):
    """A step series packed as little-endian int64 steps and float64 values.

    One row per (run, metric) instead of one per point: 100k points load as two blobs.
    """

    __tablename__ = "run_series"
    __table_args__ = (UniqueConstraint("run_id", "metric"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    metric: Mapped[str] = mapped_column(String(NAME))
    n_points: Mapped[int] = mapped_column(Integer)
    steps: Mapped[bytes] = mapped_column(LargeBinary)
    values: Mapped[bytes] = mapped_column(LargeBinary)
    min_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_value: Mapped[float | None] = mapped_column(Float, nullable=True)

    run: Mapped[Run] = relationship(back_populates="series")


class RunSeriesLevel(Base):
    """A long series min-max downsampled at ingest to ``max_points`` (a level of a pyramid), packed as
    in ``run_series``: a chart of 1,000 points of a 100k-point series reads a few KiB, not the whole
    series. The full series stays exact in ``run_series``."""

    __tablename__ = "run_series_levels"
    __table_args__ = (UniqueConstraint("run_id", "metric", "max_points"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    metric: Mapped[str] = mapped_column(String(NAME))
    max_points: Mapped[int] = mapped_column(Integer)
    n_points: Mapped[int] = mapped_column(Integer)
    steps: Mapped[bytes] = mapped_column(LargeBinary)
    values: Mapped[bytes] = mapped_column(LargeBinary)


class AuditAction(enum.StrEnum):
    exclude_run = "exclude_run"
    include_run = "include_run"
    delete_study = "delete_study"
    delete_release = "delete_release"


class AuditEvent(Base):
    """Who excluded, re-included or deleted what, when and why.

    No foreign keys on purpose: the record of a deleted study or release must outlive it, so the
    subjects are kept as plain ids and the release as its ``image:tag``."""

    __tablename__ = "audit_events"
    __table_args__ = (CheckConstraint(_in("action", AuditAction), name="action"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = _created()
    actor: Mapped[str] = mapped_column(String(NAME))  # the token's name, e.g. "ci-admin"
    actor_token_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    action: Mapped[str] = mapped_column(String(16))
    run_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    study_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    release: Mapped[str | None] = mapped_column(String(265), nullable=True, index=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    # what a deletion removed (counts per kind, run ids), or the run's cell for an exclusion
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class ApiToken(Base):
    __tablename__ = "api_tokens"
    __table_args__ = (CheckConstraint(_in("scope", TokenScope), name="scope"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME), unique=True)
    scope: Mapped[str] = mapped_column(String(16))
    # sha256 of the secret; the secret itself is shown once and never stored
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = _created()
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)  # null: never


class DispatcherPresence(Base):
    """A running dispatcher announcing which clusters it serves (renewed with its leases; a row whose
    ``expires_at`` passed is a dispatcher that stopped or died). Lets the API say that a queued run
    waits for a dispatcher nobody runs."""

    __tablename__ = "dispatchers"

    owner: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    gcs_address: Mapped[str] = mapped_column(String(500), default="")  # the Ray cluster connected to
    served_cluster_ids: Mapped[list[Any]] = mapped_column(JSON, default=list)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)


class DeviceAllocation(Base):
    """One device of one Ray node held by one attempt of a run: what makes device use exclusive across
    dispatchers and restarts. A row exists while the device is held (released = deleted); the unique
    key keeps two rows off one device. ``lease_expires_at`` is renewed by the dispatcher running the
    attempt; an expired row stays until the attempt's processes on the node are confirmed gone (see
    ``workers/dispatch/devices.py``). The key is the node, not the cluster: two cluster definitions
    may select the same nodes."""

    __tablename__ = "device_allocations"
    __table_args__ = (UniqueConstraint("node_id", "resource", "device_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[str] = mapped_column(String(NAME), index=True)  # the Ray node id
    node_address: Mapped[str] = mapped_column(String(NAME), default="")  # for people reading it
    resource: Mapped[str] = mapped_column(String(NAME))  # GPU, PPU, ...
    device_index: Mapped[int] = mapped_column(Integer)
    cluster_id: Mapped[int | None] = mapped_column(
        ForeignKey("clusters.id", ondelete="SET NULL"), nullable=True
    )
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    node_rank: Mapped[int] = mapped_column(Integer, default=0)
    owner: Mapped[str] = mapped_column(String(NAME))  # the dispatcher that took it
    lease_expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    created_at: Mapped[datetime] = _created()


class ImageManifest(Base):
    """What one image (by digest or image id) really holds, read from its files: components and versions
    (site-packages metadata, the OS, versioned shared libraries, SDK version files). Keyed by digest, so
    a tag that moved keeps both readings apart."""

    __tablename__ = "image_manifests"

    digest: Mapped[str] = mapped_column(String(300), primary_key=True)
    reference: Mapped[str] = mapped_column(String(700))  # the reference it was read through
    components: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # name -> version
    files: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # name -> the file it came from
    read_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class WebhookEvent(enum.StrEnum):
    """What a webhook can subscribe to (docs/ci.md describes each payload)."""

    release_regression = "release.regression"
    release_resolved = "release.resolved"
    study_finished = "study.finished"
    study_failed = "study.failed"


class DeliveryStatus(enum.StrEnum):
    pending = "pending"  # waiting for its next attempt (or leased by a worker delivering it now)
    delivered = "delivered"  # a 2xx answer
    failed = "failed"  # every attempt used


class Webhook(Base):
    """An admin's subscription: events POSTed to ``url``, signed with ``secret`` (never returned)."""

    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    url: Mapped[str] = mapped_column(String(2000))
    # Kept as given: the HMAC needs it (unlike a token, it cannot be stored hashed).
    secret: Mapped[str] = mapped_column(String(500))
    events: Mapped[list[Any]] = mapped_column(JSON, default=list)  # WebhookEvent values, sorted
    description: Mapped[str | None] = mapped_column(String(NAME), nullable=True)
    created_by: Mapped[str | None] = mapped_column(String(NAME), nullable=True)
    created_at: Mapped[datetime] = _created()


class WebhookDelivery(Base):
    """The outbox: one row per (event, webhook), written in the transaction of the change that caused
    the event; the delivery worker claims due rows with a lease and records each attempt here. The
    body is fixed when the row is written, so every retry sends the same bytes under the same id."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        CheckConstraint(_in("status", DeliveryStatus), name="status"),
        CheckConstraint(_in("event", WebhookEvent), name="event"),
        # the worker's claim: due pending rows, oldest first
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    delivery_id: Mapped[str] = mapped_column(String(36), unique=True)  # X-Ablate-Delivery (a UUID)
    webhook_id: Mapped[int] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"), index=True)
    event: Mapped[str] = mapped_column(String(32))
    body: Mapped[str] = mapped_column(Text)  # the exact JSON sent and signed
    status: Mapped[str] = mapped_column(String(16), default=DeliveryStatus.pending.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # counted when claimed
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    lease_owner: Mapped[str | None] = mapped_column(String(NAME), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # one entry per finished attempt: {"attempt", "at", "status_code", "error", "duration_ms"}
    history: Mapped[list[Any]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = _created()
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ReleaseWatch(Base):
    """Which releases' verdicts must be looked at again, and the regressions already announced.

    Ingest bumps ``version`` (in the transaction that stores the results); the delivery worker
    recomputes the comparisons of a release whose ``checked_version`` is behind, then, in one
    transaction, stores the regressed cells in ``regressions`` and writes the events of what changed
    to the outbox."""

    __tablename__ = "release_watch"

    release_id: Mapped[int] = mapped_column(ForeignKey("releases.id", ondelete="CASCADE"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, default=0)
    checked_version: Mapped[int] = mapped_column(Integer, default=0)
    # "baseline|cluster|workload|variant|metric" -> the regressed delta when it was announced
    regressions: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # when the comparison behind ``regressions`` began: an older one never overwrites it
    state_as_of: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ComparisonVersion(Base):
    """A version per release that the database's triggers change, to a value never given before, on
    every write a comparison of it reads (its runs, their metrics, its release row; migration 0015);
    release id 0 counts what every comparison reads (catalog rows, image manifests). A cached
    comparison is reused only while the versions it was built at are current
    (``services/comparison/cache.py``). No foreign key: the triggers fire while a release's cascade
    deletes its runs."""

    __tablename__ = "comparison_versions"

    release_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    version: Mapped[int] = mapped_column(BigInteger)
