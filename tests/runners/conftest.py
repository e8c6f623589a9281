"""Spec builders for runner tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ablate.backend.domain.runner import RunSpec

SpecFactory = Callable[..., RunSpec]


@pytest.fixture
def make_spec(tmp_path: Path) -> SpecFactory:
    """A tiny CPU torch-llm spec; keyword arguments override workload fields, ``factors``, ``env``,
    ``options`` (runner_options), ``cluster`` and ``timeout_s``."""

    def make(
        factors: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        options: dict[str, Any] | None = None,
        cluster: dict[str, Any] | None = None,
        timeout_s: float = 240.0,
        **workload: Any,
    ) -> RunSpec:
        wl: dict[str, Any] = {
            "name": "tiny-test",
            "framework": "pytorch",
            "model": "tiny",
            "seq_len": 64,
            "micro_batch": 4,
            "global_batch": None,
            "precision": "bf16",
            "warmup_steps": 1,
            "measured_steps": 3,
            "data_parallel": 1,
            "tensor_parallel": 1,
            "pipeline_parallel": 1,
            "zero_stage": 0,
            "runner": "torch-llm",
            "runner_options": options or {},
            "parser": None,
        }
        wl.update(workload)
        return RunSpec(
            run_id=42,
            workload=wl,
            variant={
                "name": "test",
                "factors": list(factors),
                "env": {},
                "image": None,
                "runner_options": {},
            },
            cluster={
                "name": "local",
                "accelerator": "cpu",
                "device_model": "cpu",
                "nodes": 1,
                "devices_per_node": 1,
                "peak_tflops_per_device": 0.5,
                **(cluster or {}),
            },
            # One thread per process: on a shared 2-core box OpenMP barriers otherwise dominate timings.
            env={"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1", **(env or {})},
            log_dir=str(tmp_path / "logs"),
            timeout_s=timeout_s,
        )

    return make
