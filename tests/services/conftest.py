"""Catalog rows for service tests, written through the services themselves."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ablate.backend.db.database import Database
from ablate.backend.db.models import Cluster, Variant, Workload
from ablate.backend.schemas.catalog import ClusterDef, ReleaseCreate, VariantDef, WorkloadDef
from ablate.backend.services import catalog


@dataclass
class Catalog:
    release: str
    cluster: str
    variants: list[str]
    workloads: list[str]


@pytest.fixture
def seeded(database: Database) -> Catalog:
    with database.transaction() as s:
        catalog.create_release(s, ReleaseCreate(image="training-nv-pytorch", tag="25.12", platform="gpu"))
        catalog.create_named(s, Cluster, ClusterDef(name="cpu-1", accelerator="cpu", devices_per_node=0))
        ladder = [
            ("Base", []),
            ("CompilerOpt", ["compiler_opt"]),
            ("CompilerOpt+CkptOpt", ["compiler_opt", "ckpt_opt"]),
        ]
        for pos, (name, factors) in enumerate(ladder):
            catalog.create_named(s, Variant, VariantDef(name=name, position=pos, factors=factors))
        for name in ("tiny-a", "tiny-b"):
            catalog.create_named(s, Workload, WorkloadDef(name=name, runner="torch-llm"))
    return Catalog("training-nv-pytorch:25.12", "cpu-1", [n for n, _ in ladder], ["tiny-a", "tiny-b"])
