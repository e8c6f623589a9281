"""Parent side of torch-llm: start one fresh child process per rank, relay progress, map failures."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from ablate.backend.domain.factors import factor_error, normalize_factor
from ablate.backend.domain.runner import DEFAULT_RUNNER, ProgressCallback, RunResult, RunSpec
from ablate.workers.containers import package_mounts
from ablate.workers.runners import hostload
from ablate.workers.runners.process import (
    ProcessGroup,
    ProcOutcome,
    RunProcess,
    describe_returncode,
    start_run_process,
)
from ablate.workers.runners.torch_llm.protocol import parse_event

NAME = DEFAULT_RUNNER  # the built-in runner is the default one
# Factors the image/environment provides (the dispatcher picks image and env); torch-llm only records them.
_IMAGE_FACTORS = {
    "accl": "ACCL collectives provided by the image (NCCL-compatible library)",
    "ac2": "AC2 BaseOS provided by the image",
}
_REFUSED_ON_CPU = {
    "accl": "ACCL needs GPU/PPU collectives",
    "ac2": "AC2 is a GPU/PPU golden image; a cpu run cannot exercise it",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TorchLLMRunner:
    name = NAME

    def supported_factors(self, accelerator: str) -> set[str]:
        own = {"compiler_opt", "ckpt_opt"}  # torch.compile, activation checkpointing: really implemented
        return own if accelerator.lower() == "cpu" else own | set(_IMAGE_FACTORS)

    def check_factors(self, factors: Iterable[str], accelerator: str) -> str | None:
        acc = accelerator.lower()
        supported = self.supported_factors(acc)
        for raw in factors:
            f = normalize_factor(raw)
            if f in supported:
                continue
            why = _REFUSED_ON_CPU.get(f) if acc == "cpu" else None
            return factor_error(
                NAME, raw, acc, why or f"unknown factor (supported: {', '.join(sorted(supported))})"
            )
        return None

    def run(self, spec: RunSpec, progress: ProgressCallback | None = None) -> RunResult:
        err = self.check_factors(spec.factors, spec.accelerator)
        if err:
            return RunResult.failed(err, "benchmark", environment=spec.env)
        n = int(spec.runner_options.get("local_world_size", spec.local_world_size) or 1)
        if spec.world_size == 1 and n > 1:
            return launch_local_ranks(spec, n, progress)
        return _run_ranks([spec], progress)


def launch_local_ranks(spec: RunSpec, n: int, progress: ProgressCallback | None = None) -> RunResult:
    """Start ``n`` ranks of ``spec`` on this host (like ``torchrun --nproc_per_node n``) on a free port;
    returns rank 0's result, whose metrics are already global (reduced over ranks)."""
    port = free_port()
    specs = [
        replace(
            spec,
            rank=r,
            world_size=n,
            local_rank=r,
            local_world_size=n,
            master_addr="127.0.0.1",
            master_port=port,
        )
        for r in range(n)
    ]
    return _run_ranks(specs, progress)


def _rank_env(spec: RunSpec, local_ranks: int) -> dict[str, str]:
    """The variables this runner adds to spec.env: rank wiring and, on CPU, a fair thread split."""
    extra = {
        "MASTER_ADDR": spec.master_addr,
        "MASTER_PORT": str(spec.master_port),
        "WORLD_SIZE": str(spec.world_size),
        "RANK": str(spec.rank),
        "LOCAL_RANK": str(spec.local_rank),
        "LOCAL_WORLD_SIZE": str(max(1, spec.local_world_size)),
    }
    if spec.accelerator == "cpu" and local_ranks > 1 and "OMP_NUM_THREADS" not in spec.env:
        # Without this every rank starts one thread per core and they thrash each other.
        extra["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // local_ranks))
    return {**spec.env, **extra}


def _log_path(spec: RunSpec, ranks: int) -> Path:
    return Path(spec.log_file(spec.rank if ranks > 1 or spec.world_size > 1 else None))


def _run_ranks(specs: list[RunSpec], progress: ProgressCallback | None) -> RunResult:
    lead = specs[0]
    work = Path(lead.log_dir) / f"run-{lead.run_id}.work"
    work.mkdir(parents=True, exist_ok=True)
    group = ProcessGroup()
    envs = []
    result_paths = []
    host_start = hostload.sample(gpu=lead.accelerator.lower() == "gpu")
    t0 = time.monotonic()
    for spec in specs:
        spec_path = work / f"rank{spec.rank}.spec.json"
        result_path = work / f"rank{spec.rank}.result.json"
        result_path.unlink(missing_ok=True)
        spec_path.write_text(json.dumps(spec.to_dict()))
        env = _rank_env(spec, len(specs))
        envs.append(env)
        result_paths.append(result_path)
        child_env = {**env, "PYTHONUNBUFFERED": "1"}
        python, mounts = sys.executable, []
        if spec.container:
            # The image brings Python and torch; this installation's ablate package is mounted in.
            python = str(spec.container.get("python") or "python3")
            mounts = package_mounts()
            child_env["PYTHONPATH"] = ":".join(p for p in ("/opt/ablate", env.get("PYTHONPATH")) if p)
        argv = [
            python,
            "-m",
            "ablate.workers.runners.torch_llm",
            "--spec",
            str(spec_path),
            "--result",
            str(result_path),
        ]
        try:
            process = RunProcess(
                argv,
                child_env,
                _log_path(spec, len(specs)),
                rank=spec.rank if len(specs) > 1 else None,
                extra_mounts=mounts,
            )
            start_run_process(group, spec, process)
        except (OSError, ValueError) as exc:
            group.kill_all()
            return RunResult.failed(
                f"could not start torch-llm child: {exc}", "infrastructure", environment=env
            )

    def on_line(index: int, line: str) -> None:
        event = parse_event(line)
        if index == 0 and progress is not None and event and event.get("event") == "step":
            progress(int(event["step"]), int(event["total"]), event.get("tokens_per_s"))

    outcomes = group.wait(lead.timeout_s, on_line, fail_fast=True)
    elapsed = time.monotonic() - t0
    host = hostload.provenance(host_start, hostload.sample(gpu=host_start.gpu_pids is not None))
    return _assemble(specs, outcomes, result_paths, envs[0], elapsed, host)


def _read_result(path: Path) -> RunResult | None:
    try:
        return RunResult.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError):
        return None


def _assemble(
    specs: list[RunSpec],
    outcomes: list[ProcOutcome],
    result_paths: list[Path],
    env: dict[str, str],
    elapsed: float,
    host: dict[str, str],
) -> RunResult:
    lead, first = specs[0], outcomes[0]
    prov = {**_parent_provenance(lead, len(specs)), **host}
    log_errors = sorted({o.log_error for o in outcomes if o.log_error})
    if log_errors:  # the run goes on without its log (full disk): its result is kept, the gap said
        prov["log_error"] = "; ".join(log_errors)[:500]
    if first.cancelled is not None:
        return RunResult.failed(
            f"cancelled: {first.cancelled}", "infrastructure", log_tail=first.tail_text,
            log_path=first.log_path, provenance=prov, environment=env,
        )  # fmt: skip
    if first.timed_out:
        return RunResult.failed(
            f"timed out after {lead.timeout_s:g} s (process group killed)", "timeout",
            log_tail=first.tail_text, log_path=first.log_path, provenance=prov, environment=env,
        )  # fmt: skip
    # Report the root cause: a rank that failed on its own, not one we killed because a peer died.
    failures = []
    for spec, out, path in zip(specs, outcomes, result_paths, strict=True):
        res = _read_result(path)
        if out.returncode == 0 and res is not None and res.succeeded:
            continue
        failures.append((out.killed_by_peer, spec, out, res))
    if failures:
        failures.sort(key=lambda f: f[0])
        _, spec, out, res = failures[0]
        where = f"rank {spec.rank}: " if len(specs) > 1 or spec.world_size > 1 else ""
        code = out.returncode if out.returncode is not None else -9
        if res is not None and not res.succeeded and code >= 0:
            error, kind = res.error or "failed", res.failure_kind or "benchmark"
        elif code < 0:
            error, kind = f"torch-llm child {describe_returncode(code)}", "infrastructure"
        else:
            error, kind = (
                f"torch-llm child {describe_returncode(code)} without writing a result",
                "infrastructure",
            )
        return RunResult.failed(
            where + error,
            kind,
            log_tail=out.tail_text,
            log_path=out.log_path,
            provenance=prov,
            environment=env,
        )
    res = _read_result(result_paths[0])
    assert res is not None
    res.metrics["elapsed_s"] = (elapsed, "s")
    res.provenance = {**res.provenance, **prov}
    res.log_tail = first.tail_text
    res.log_path = first.log_path
    res.environment = env
    return res


def _parent_provenance(spec: RunSpec, local_ranks: int) -> dict[str, str]:
    prov = {"variant": str(spec.variant.get("name", "")), "factors": ",".join(spec.factors)}
    for f in spec.factors:
        if f in _IMAGE_FACTORS:
            prov[f"factor_{f}"] = _IMAGE_FACTORS[f]
    prov["local_ranks"] = str(local_ranks)
    return prov
