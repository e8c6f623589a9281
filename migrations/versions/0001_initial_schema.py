"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("scope IN ('read', 'submit', 'admin')", name=op.f("ck_api_tokens_scope")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("name", name=op.f("uq_api_tokens_name")),
        sa.UniqueConstraint("secret_hash", name=op.f("uq_api_tokens_secret_hash")),
    )
    op.create_table(
        "clusters",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("accelerator", sa.String(length=8), nullable=False),
        sa.Column("device_model", sa.String(length=200), nullable=True),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("devices_per_node", sa.Integer(), nullable=False),
        sa.Column("peak_tflops_per_device", sa.Float(), nullable=True),
        sa.Column("interconnect", sa.String(length=64), nullable=True),
        sa.Column("ray_address", sa.String(length=500), nullable=True),
        sa.Column("resource_name", sa.String(length=64), nullable=True),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("accelerator IN ('gpu', 'ppu', 'cpu')", name=op.f("ck_clusters_accelerator")),
        sa.CheckConstraint("nodes >= 1 AND devices_per_node >= 0", name=op.f("ck_clusters_size")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_clusters")),
        sa.UniqueConstraint("name", name=op.f("uq_clusters_name")),
    )
    op.create_table(
        "releases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("image", sa.String(length=200), nullable=False),
        sa.Column("tag", sa.String(length=64), nullable=False),
        sa.Column("platform", sa.String(length=8), nullable=False),
        sa.Column("release_date", sa.Date(), nullable=True),
        sa.Column("manifest", sa.JSON(), nullable=False),
        sa.Column("driver_requirements", sa.JSON(), nullable=False),
        sa.Column("notes", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("platform IN ('gpu', 'ppu')", name=op.f("ck_releases_platform")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_releases")),
        sa.UniqueConstraint("image", "tag", name=op.f("uq_releases_image_tag")),
    )
    with op.batch_alter_table("releases", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_releases_image"), ["image"], unique=False)

    op.create_table(
        "variants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("factors", sa.JSON(), nullable=False),
        sa.Column("env", sa.JSON(), nullable=False),
        sa.Column("image", sa.String(length=500), nullable=True),
        sa.Column("runner_options", sa.JSON(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_variants")),
        sa.UniqueConstraint("name", name=op.f("uq_variants_name")),
    )
    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("framework", sa.String(length=64), nullable=True),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("data_parallel", sa.Integer(), nullable=False),
        sa.Column("tensor_parallel", sa.Integer(), nullable=False),
        sa.Column("pipeline_parallel", sa.Integer(), nullable=False),
        sa.Column("zero_stage", sa.Integer(), nullable=True),
        sa.Column("seq_len", sa.Integer(), nullable=True),
        sa.Column("micro_batch", sa.Integer(), nullable=True),
        sa.Column("global_batch", sa.Integer(), nullable=True),
        sa.Column("precision", sa.String(length=16), nullable=True),
        sa.Column("warmup_steps", sa.Integer(), nullable=False),
        sa.Column("measured_steps", sa.Integer(), nullable=True),
        sa.Column("runner", sa.String(length=64), nullable=True),
        sa.Column("runner_options", sa.JSON(), nullable=False),
        sa.Column("parser", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "data_parallel >= 1 AND tensor_parallel >= 1 AND pipeline_parallel >= 1",
            name=op.f("ck_workloads_parallel"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workloads")),
        sa.UniqueConstraint("name", name=op.f("uq_workloads_name")),
    )
    op.create_table(
        "studies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("release_id", sa.Integer(), nullable=False),
        sa.Column("cluster_id", sa.Integer(), nullable=False),
        sa.Column("repeats", sa.Integer(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("order_seed", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')",
            name=op.f("ck_studies_status"),
        ),
        sa.CheckConstraint("repeats >= 1", name=op.f("ck_studies_repeats")),
        sa.ForeignKeyConstraint(["cluster_id"], ["clusters.id"], name=op.f("fk_studies_cluster_id_clusters")),
        sa.ForeignKeyConstraint(
            ["release_id"], ["releases.id"], name=op.f("fk_studies_release_id_releases"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_studies")),
    )
    with op.batch_alter_table("studies", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_studies_cluster_id"), ["cluster_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_studies_release_id"), ["release_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_studies_status"), ["status"], unique=False)

    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=True),
        sa.Column("release_id", sa.Integer(), nullable=False),
        sa.Column("variant_id", sa.Integer(), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("cluster_id", sa.Integer(), nullable=False),
        sa.Column("repeat", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("idempotency_key", sa.String(length=300), nullable=True),
        sa.Column("queue_order", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("provenance", sa.JSON(), nullable=False),
        sa.Column("environment", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("failure_kind", sa.String(length=32), nullable=True),
        sa.Column("log_tail", sa.Text(), nullable=True),
        sa.Column("log_path", sa.String(length=1000), nullable=True),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("current_step", sa.Integer(), nullable=True),
        sa.Column("total_steps", sa.Integer(), nullable=True),
        sa.Column("latest_throughput", sa.Float(), nullable=True),
        sa.CheckConstraint("source IN ('scheduled', 'ci')", name=op.f("ck_runs_source")),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')", name=op.f("ck_runs_status")
        ),
        sa.CheckConstraint("repeat >= 0 AND attempt >= 1", name=op.f("ck_runs_counts")),
        sa.ForeignKeyConstraint(["cluster_id"], ["clusters.id"], name=op.f("fk_runs_cluster_id_clusters")),
        sa.ForeignKeyConstraint(
            ["release_id"], ["releases.id"], name=op.f("fk_runs_release_id_releases"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["study_id"], ["studies.id"], name=op.f("fk_runs_study_id_studies"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["variant_id"], ["variants.id"], name=op.f("fk_runs_variant_id_variants")),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workloads.id"], name=op.f("fk_runs_workload_id_workloads")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_runs_idempotency_key")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_cluster_id"), ["cluster_id"], unique=False)
        batch_op.create_index(
            "ix_runs_release_cell", ["release_id", "cluster_id", "workload_id", "variant_id"], unique=False
        )
        batch_op.create_index("ix_runs_status_queue_order", ["status", "queue_order"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_study_id"), ["study_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_variant_id"), ["variant_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_workload_id"), ["workload_id"], unique=False)

    op.create_table(
        "run_metrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("unit", sa.String(length=32), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_metrics_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_metrics")),
        sa.UniqueConstraint("run_id", "name", name=op.f("uq_run_metrics_run_id_name")),
    )
    with op.batch_alter_table("run_metrics", schema=None) as batch_op:
        batch_op.create_index("ix_run_metrics_name", ["name"], unique=False)

    op.create_table(
        "run_series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(length=200), nullable=False),
        sa.Column("n_points", sa.Integer(), nullable=False),
        sa.Column("steps", sa.LargeBinary(), nullable=False),
        sa.Column("values", sa.LargeBinary(), nullable=False),
        sa.Column("min_value", sa.Float(), nullable=True),
        sa.Column("max_value", sa.Float(), nullable=True),
        sa.Column("last_value", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_series_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_series")),
        sa.UniqueConstraint("run_id", "metric", name=op.f("uq_run_series_run_id_metric")),
    )


def downgrade() -> None:
    op.drop_table("run_series")
    with op.batch_alter_table("run_metrics", schema=None) as batch_op:
        batch_op.drop_index("ix_run_metrics_name")

    op.drop_table("run_metrics")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_workload_id"))
        batch_op.drop_index(batch_op.f("ix_runs_variant_id"))
        batch_op.drop_index(batch_op.f("ix_runs_study_id"))
        batch_op.drop_index("ix_runs_status_queue_order")
        batch_op.drop_index("ix_runs_release_cell")
        batch_op.drop_index(batch_op.f("ix_runs_cluster_id"))

    op.drop_table("runs")
    with op.batch_alter_table("studies", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_studies_status"))
        batch_op.drop_index(batch_op.f("ix_studies_release_id"))
        batch_op.drop_index(batch_op.f("ix_studies_cluster_id"))

    op.drop_table("studies")
    op.drop_table("workloads")
    op.drop_table("variants")
    with op.batch_alter_table("releases", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_releases_image"))

    op.drop_table("releases")
    op.drop_table("clusters")
    op.drop_table("api_tokens")
