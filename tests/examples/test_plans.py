"""examples/plans/: valid StudyPlan bodies, queued together in one database on SQLite and PostgreSQL
(so the catalog entries they share agree), with the environment their runs get."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import func, select

from ablate.backend.cli.releases import load_release_file
from ablate.backend.db.database import Database
from ablate.backend.db.models import Cluster, Run, Variant
from ablate.backend.domain.factors import normalize_factors
from ablate.backend.schemas.catalog import ClusterDef, VariantDef, WorkloadDef
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import catalog, studies
from ablate.workers.envrules import plan_environment
from ablate.workers.parsers import get_parser
from tests.examples.helpers import EXAMPLE_RELEASE_FILES, PLANS, REAL_RELEASES, ROOT, load_yaml

PLAN_FILES = sorted(PLANS.glob("*.yaml"))
GPU = PLANS / "gpu-ladder-nv-25.12.yaml"
PPU = PLANS / "ppu-ladder-xpu-26.01.yaml"
CPU = PLANS / "cpu-factorial-tiny.yaml"
LADDER_FACTORS = [
    [],
    ["accl"],
    ["ac2", "accl"],
    ["ac2", "accl", "compiler_opt"],
    ["ac2", "accl", "ckpt_opt", "compiler_opt"],
]


def plan(path: Path) -> StudyPlan:
    return StudyPlan.model_validate(load_yaml(path))


def test_the_examples_are_there() -> None:
    assert {GPU, PPU, CPU} <= set(PLAN_FILES)


@pytest.mark.parametrize("path", PLAN_FILES, ids=lambda p: p.name)
def test_plan_validates_against_the_studies_schema(path: Path) -> None:
    p = plan(path)
    assert p.name and p.order_seed is not None
    for v in p.variants:
        assert not isinstance(v, str), "example plans define their variants in full"
        factors = {f.replace("-", "_").lower() for f in v.factors}
        if "ckpt_opt" in factors:
            assert v.env.get("CHECKPOINT_OPTIMIZATION") == "true", v.name
        else:
            assert "CHECKPOINT_OPTIMIZATION" not in v.env, v.name


@pytest.mark.parametrize("path", [GPU, PPU], ids=lambda p: p.name)
def test_ladders_have_the_five_rungs(path: Path) -> None:
    p = plan(path)
    variants = sorted(p.variants, key=lambda v: v.position)
    assert [v.position for v in variants] == [1, 2, 3, 4, 5]
    assert [sorted(normalize_factors(v.factors)) for v in variants] == LADDER_FACTORS
    names = [v.name.removeprefix("PPU ") for v in variants]
    assert names == ["Base", "Base+ACCL", "AC2+ACCL", "AC2+ACCL+CompilerOpt", "AC2+ACCL+CompilerOpt+CkptOpt"]
    runners = {w.name: w.runner for w in p.workloads}
    assert sorted(runners.values()) == ["command", "torch-llm"]


def test_gpu_and_ppu_clusters_select_their_pools() -> None:
    gpu, ppu = plan(GPU).cluster, plan(PPU).cluster
    assert gpu.accelerator == "gpu" and gpu.labels == {"pool": "gpu"}
    assert ppu.accelerator == "ppu" and ppu.resource_name == "PPU" and ppu.labels == {"pool": "ppu"}
    for v in plan(PPU).variants:
        assert v.env["NVTE_FLASH_ATTN"] == "1" and v.env["NVTE_FUSED_ATTN"] == "0"
    for v in plan(GPU).variants:
        assert not any(key.startswith("NVTE_") for key in v.env)


def test_ljperf_commands_are_the_ones_in_the_notes() -> None:
    commands = {
        path.name: next(w.runner_options["command"] for w in plan(path).workloads if w.runner == "command")
        for path in (GPU, PPU)
    }
    assert commands == {
        GPU.name: "ljperf benchmark --model deepspeed/llama3-8b",  # training-nv-pytorch 25.12
        PPU.name: "ljperf --action train --model_name deepspeed/llama3-8b",  # training-xpu-pytorch 26.01
    }


@pytest.mark.parametrize("path", [GPU, PPU], ids=lambda p: p.name)
def test_regex_parser_config_reads_the_assumed_ljperf_lines(path: Path) -> None:
    workload = next(w for w in plan(path).workloads if w.runner == "command")
    parser = get_parser(str(workload.parser), workload.runner_options["parser_options"])
    for step in (1, 2):
        parser.feed(f"step {step}/50 | loss 2.5 | step_time 2.0 s | tokens/s 8192.0 | mem 60.5 GiB")
    parser.feed("step 3 truncated")
    result = parser.finish()
    assert [r.step for r in result.steps] == [1, 2]
    assert result.steps[0].values == {
        "loss": 2.5,
        "step_time_s": 2.0,
        "throughput_tokens_per_s": 8192.0,
        "peak_memory_gib": 60.5,
    }
    assert result.total_steps == 50 and result.malformed_lines == 1


def test_factorial_covers_every_combination() -> None:
    p = plan(CPU)
    assert p.cluster.accelerator == "cpu"
    combos = {tuple(normalize_factors(v.factors)) for v in p.variants}
    assert combos == {(), ("compiler_opt",), ("ckpt_opt",), ("ckpt_opt", "compiler_opt")}
    assert [v.name for v in sorted(p.variants, key=lambda v: v.position)] == [
        "Base",
        "+CompilerOpt",
        "+CkptOpt",
        "+CompilerOpt+CkptOpt",
    ]
    (workload,) = p.workloads
    assert workload.runner == "torch-llm" and workload.model == "tiny"


def _as_dict(row: Any, *fields: str) -> dict[str, Any]:
    return {f: getattr(row, f) for f in fields}


def test_all_plans_queue_in_one_database(database: Database) -> None:
    with database.transaction() as session:
        for path in (*REAL_RELEASES, *EXAMPLE_RELEASE_FILES):
            catalog.import_release(session, load_release_file(path))
        created = {path.name: studies.create_study(session, plan(path)) for path in PLAN_FILES}
        counts = {name: len(study.runs) for name, study in created.items()}
    for path in PLAN_FILES:
        p = plan(path)
        assert counts[path.name] == len(p.variants) * len(p.workloads) * p.repeats
    with database.read() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == sum(counts.values())
        # "Base" and torch-llm-llama3-8b are shared between plans: one catalog entry each.
        assert session.scalar(select(func.count()).select_from(Variant).where(Variant.name == "Base")) == 1


def _env(database: Database, release: str, cluster: str, variant: str) -> dict[str, str]:
    with database.read() as session:
        r = catalog.get_release(session, release)
        c = catalog.get_named(session, Cluster, cluster)
        v = catalog.get_named(session, Variant, variant)
        rel = _as_dict(r, "platform", "manifest", "notes")
        clu = _as_dict(c, "name", "accelerator", "nodes", "devices_per_node", "interconnect")
        var = _as_dict(v, "name", "env", "factors")
    return plan_environment(var, rel, clu).env


def test_runs_get_the_release_environment_rules(database: Database) -> None:
    with database.transaction() as session:
        for path in REAL_RELEASES:
            catalog.import_release(session, load_release_file(path))
        for path in (GPU, PPU):
            studies.create_study(session, plan(path))

    ppu = _env(database, "training-xpu-pytorch:26.01", "ppu-1x16-hpn", "PPU AC2+ACCL+CompilerOpt+CkptOpt")
    assert ppu["NVTE_FLASH_ATTN"] == "1" and ppu["NVTE_FUSED_ATTN"] == "0"
    assert ppu["NCCL_SOCKET_IFNAME"] == "hpn0"  # all 16 cards of a machine on HPN
    assert ppu["CHECKPOINT_OPTIMIZATION"] == "true"

    gpu = _env(database, "training-nv-pytorch:25.12", "gpu-1x8", "Base")
    assert gpu == {"NCCL_SOCKET_IFNAME": "eth0"}  # 8 cards per pod; no NVTE rule off PPU


def test_snippets_in_docs_plans_md_are_valid() -> None:
    text = (ROOT / "docs" / "plans.md").read_text(encoding="utf-8")
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    checked = 0
    for block in blocks:
        if isinstance(block, dict) and "cluster" in block:
            ClusterDef.model_validate(block["cluster"])
            checked += 1
        elif isinstance(block, list):
            for item in block:
                model = VariantDef if "factors" in item else WorkloadDef
                model.model_validate(item)
                checked += 1
    assert checked == 4
