"""The data model on both databases: constraints hold, JSON and timestamps round-trip, series pack."""

from __future__ import annotations

from datetime import UTC, date, datetime

import numpy as np
import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from ablate.backend.db.database import Database
from ablate.backend.db.models import Cluster, Release, Run, RunMetric, RunSeries, Variant, Workload
from ablate.backend.db.series_codec import pack, unpack


def _catalog(db: Database) -> dict[str, int]:
    with db.transaction() as s:
        rel = Release(
            image="training-nv-pytorch",
            tag="25.12",
            platform="gpu",
            release_date=date(2025, 12, 15),
            manifest={"torch": "2.9.0", "vllm": "0.12.0", "flashinfer": "0.5.3"},
            driver_requirements={"cuda_13.0": ">=580", "cuda_12.8": ">=575"},
            notes={"known_issues": ["none"]},
        )
        var = Variant(name="AC2+ACCL+CompilerOpt", position=4, factors=["ac2", "accl", "compiler_opt"])
        wl = Workload(name="deepspeed/llama3-8b", framework="deepspeed", model="llama3-8b", seq_len=8192)
        cl = Cluster(name="h200-2x8", accelerator="gpu", device_model="H200", nodes=2, devices_per_node=8)
        s.add_all([rel, var, wl, cl])
        s.flush()
        return {"release_id": rel.id, "variant_id": var.id, "workload_id": wl.id, "cluster_id": cl.id}


def test_catalog_round_trips_json_and_dates(database: Database) -> None:
    ids = _catalog(database)
    with database.read() as s:
        rel = s.get(Release, ids["release_id"])
        assert rel is not None
        assert rel.manifest["vllm"] == "0.12.0"
        assert rel.release_date == date(2025, 12, 15)
        assert rel.created_at.tzinfo is not None
        assert rel.ref == "training-nv-pytorch:25.12"


def test_release_is_unique_per_image_and_tag(database: Database) -> None:
    _catalog(database)
    with pytest.raises(IntegrityError), database.transaction() as s:
        s.add(Release(image="training-nv-pytorch", tag="25.12", platform="gpu"))
    with database.read() as s:
        assert s.scalar(select(func.count()).select_from(Release)) == 1


def test_check_constraints_refuse_bad_enums(database: Database) -> None:
    with pytest.raises(IntegrityError), database.transaction() as s:
        s.add(Cluster(name="weird", accelerator="tpu", nodes=1, devices_per_node=1))
    with pytest.raises(IntegrityError), database.transaction() as s:
        s.add(Release(image="x", tag="1", platform="npu"))


def test_run_metrics_unique_and_cascade(database: Database) -> None:
    ids = _catalog(database)
    now = datetime.now(UTC)
    with database.transaction() as s:
        run = Run(**ids, repeat=0, status="succeeded", source="ci", idempotency_key="k1", started_at=now)
        run.metrics = [RunMetric(name="throughput_tokens_per_s", value=412345.0, unit="tokens/s")]
        s.add(run)
        s.flush()
        run_id = run.id
    with pytest.raises(IntegrityError), database.transaction() as s:
        s.add(RunMetric(run_id=run_id, name="throughput_tokens_per_s", value=1.0, unit="tokens/s"))
    with pytest.raises(IntegrityError), database.transaction() as s:
        s.add(Run(**ids, repeat=1, idempotency_key="k1"))
    with database.transaction() as s:
        s.delete(s.get(Run, run_id))
    with database.read() as s:
        assert s.scalar(select(func.count()).select_from(RunMetric)) == 0


def test_series_of_100k_points_round_trip(database: Database) -> None:
    ids = _catalog(database)
    steps = np.arange(100_000, dtype=np.int64)
    values = np.sin(steps / 1000.0) + 5.0
    blob_steps, blob_values = pack(steps, values)
    with database.transaction() as s:
        run = Run(**ids)
        run.series = [
            RunSeries(
                metric="step_time_s",
                n_points=len(steps),
                steps=blob_steps,
                values=blob_values,
                min_value=float(values.min()),
                max_value=float(values.max()),
                last_value=float(values[-1]),
            )
        ]
        s.add(run)
    with database.read() as s:
        row = s.scalars(select(RunSeries)).one()
        got_steps, got_values = unpack(row.steps, row.values)
    np.testing.assert_array_equal(got_steps, steps)
    np.testing.assert_array_equal(got_values, values)


def test_pack_refuses_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="equal length"):
        pack([1, 2, 3], [1.0, 2.0])
