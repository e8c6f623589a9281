"""Child-process entry point: ``python -m ablate.workers.runners.torch_llm --spec S.json --result R.json``.

Writes progress as JSON lines prefixed with :data:`EVENT_PREFIX` on stdout (everything else on
stdout/stderr is log) and the rank's RunResult as JSON to ``--result``. Exit codes: 0 succeeded,
1 the benchmark failed, 2 the environment failed (no device, peers unreachable).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from ablate.backend.domain.runner import RunResult, RunSpec
from ablate.backend.domain.states import FailureKind
from ablate.workers.runners.torch_llm.protocol import EVENT_PREFIX


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(EVENT_PREFIX + json.dumps(event) + "\n")
    sys.stdout.flush()


def _fail(result_path: Path, error: str, kind: FailureKind, code: int) -> int:
    traceback.print_exc()
    result_path.write_text(json.dumps(RunResult.failed(error, kind).to_dict()))
    return code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ablate.workers.runners.torch_llm")
    ap.add_argument("--spec", required=True, type=Path)
    ap.add_argument("--result", required=True, type=Path)
    args = ap.parse_args(argv)
    spec = RunSpec.from_dict(json.loads(args.spec.read_text()))

    from ablate.workers.runners.torch_llm.config import TrainConfig

    try:
        cfg = TrainConfig.from_spec(spec)
    except ValueError as exc:
        return _fail(args.result, f"invalid torch-llm configuration: {exc}", "benchmark", 1)

    import torch.distributed as dist

    from ablate.workers.runners.torch_llm.train import (
        SetupError,
        init_distributed,
        run_training,
        select_device,
    )

    try:
        device = select_device(cfg)
        backend = init_distributed(cfg, device)
    except SetupError as exc:
        return _fail(args.result, str(exc), "infrastructure", 2)
    _emit({"event": "started", "rank": cfg.rank, "device": str(device), "total": cfg.total_steps})
    try:
        out = run_training(cfg, _emit, device, backend)
    except Exception as exc:
        # Includes CUDA out-of-memory: a configuration that does not fit is the benchmark's result.
        # No barrier here: peers may be blocked in a collective this rank will never join.
        if dist.is_initialized():
            dist.destroy_process_group()
        return _fail(args.result, f"{type(exc).__name__}: {exc}", "benchmark", 1)
    if dist.is_initialized():
        _leave_group(dist)
    result = RunResult(
        status="succeeded", metrics=out["metrics"], series=out["series"], provenance=out["provenance"]
    )
    args.result.write_text(json.dumps(result.to_dict()))
    return 0


def _leave_group(dist: Any) -> None:
    """After a successful run, tear the process group down with every rank still present: a rank
    that leaves while its peer's Gloo threads still talk to it can abort that peer ("terminate
    called without an active exception", seen at load 10 after all steps had finished)."""
    try:
        dist.barrier()
    except Exception:
        traceback.print_exc()  # a peer already gone: nothing to wait for
    dist.destroy_process_group()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the interpreter's finalisation: Gloo's and torch's C++ threads torn down during it can
    # abort a process whose result is already written (the PyTorch issue behind pytorch#179291).
    os._exit(code)
