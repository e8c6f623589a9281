"""The training loop of one rank, and the measurements taken from it.

Runs in the child process (see ``__main__``) but is importable so the benchmark harness can compare it
with a bare loop in the same process.
"""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from ablate.backend.domain.runner import DEFAULT_RUNNER
from ablate.workers.runners.torch_llm import flops
from ablate.workers.runners.torch_llm.config import TrainConfig
from ablate.workers.runners.torch_llm.model import Transformer, lm_loss

Emit = Callable[[dict[str, Any]], None]
GIB = float(2**30)


class SetupError(RuntimeError):
    """The environment, not the benchmark, failed: no device, peers unreachable, ..."""


@dataclass
class Trainer:
    """Model, optimiser and data of one rank, ready to step."""

    cfg: TrainConfig
    device: torch.device
    model: nn.Module  # what is called: possibly DDP-wrapped and compiled
    raw_model: Transformer
    ddp: nn.parallel.DistributedDataParallel | None
    optimizer: torch.optim.Optimizer
    batches: list[torch.Tensor]
    amp_dtype: torch.dtype | None
    scaler: torch.amp.GradScaler | None
    n_non_embedding: int
    notes: dict[str, str] = field(default_factory=dict)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def step(self, i: int) -> torch.Tensor:
        """One optimiser step over grad_accum micro-batches; returns the (detached) mean loss."""
        cfg = self.cfg
        self.optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=self.device)
        for m in range(cfg.grad_accum):
            tokens = self.batches[(i * cfg.grad_accum + m) % len(self.batches)]
            # Only the last micro-batch all-reduces gradients.
            last = m == cfg.grad_accum - 1
            sync = contextlib.nullcontext() if self.ddp is None or last else self.ddp.no_sync()
            with sync:
                with self.autocast():
                    loss = lm_loss(self.model(tokens), tokens) / cfg.grad_accum
                (self.scaler.scale(loss) if self.scaler else loss).backward()
            total += loss.detach()
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        return total


def select_device(cfg: TrainConfig) -> torch.device:
    if cfg.accelerator == "cpu":
        return torch.device("cpu")
    # PPUs expose the CUDA programming model to PyTorch.
    if not torch.cuda.is_available():
        raise SetupError(f"{cfg.accelerator} cluster but torch.cuda is not available in this process")
    torch.cuda.set_device(cfg.local_rank)
    return torch.device("cuda", cfg.local_rank)


def init_distributed(cfg: TrainConfig, device: torch.device) -> str | None:
    if cfg.world_size <= 1:
        return None
    backend = "nccl" if device.type == "cuda" else "gloo"
    try:
        dist.init_process_group(
            backend,
            rank=cfg.rank,
            world_size=cfg.world_size,
            timeout=timedelta(seconds=float(os.environ.get("ABLATE_DIST_TIMEOUT_S", "300"))),
            device_id=device if device.type == "cuda" else None,
        )
    except Exception as exc:
        raise SetupError(f"torch.distributed init ({backend}) failed: {exc}") from exc
    return backend


def build_trainer(cfg: TrainConfig, device: torch.device) -> Trainer:
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    raw = Transformer(cfg.model, cfg.seq_len, cfg.ckpt_layers).to(device)
    n_ne = flops.non_embedding_params(raw)
    model: nn.Module = raw
    ddp = None
    if cfg.world_size > 1:
        ddp = nn.parallel.DistributedDataParallel(
            raw, device_ids=[device.index] if device.type == "cuda" else None
        )
        model = ddp
    if cfg.zero_stage == 1 and cfg.world_size > 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        optimizer: torch.optim.Optimizer = ZeroRedundancyOptimizer(
            raw.parameters(), optimizer_class=torch.optim.AdamW, lr=cfg.lr
        )
    else:
        optimizer = torch.optim.AdamW(raw.parameters(), lr=cfg.lr, fused=device.type == "cuda")
    notes: dict[str, str] = {}
    if cfg.compile:
        # Compile after DDP wrapping, so DDPOptimizer can split graphs at bucket boundaries.
        # Given a module, torch.compile returns an OptimizedModule (an nn.Module); its stub says Callable.
        compiled = torch.compile(model, mode=cfg.compile_mode, backend=cfg.compile_backend)
        model = cast(nn.Module, compiled)
        mode = cfg.compile_mode or "default"
        notes["compile"] = f"torch.compile(mode={mode}, backend={cfg.compile_backend})"
    amp_dtype, scaler = _precision(cfg, device, notes)
    gen = torch.Generator().manual_seed(cfg.seed + 1000 * (cfg.rank + 1))  # different data per rank
    batches = [
        torch.randint(cfg.model.vocab_size, (cfg.micro_batch, cfg.seq_len), generator=gen).to(device)
        for _ in range(max(1, cfg.data_batches))
    ]
    return Trainer(cfg, device, model, raw, ddp, optimizer, batches, amp_dtype, scaler, n_ne, notes)


def _precision(
    cfg: TrainConfig, device: torch.device, notes: dict[str, str]
) -> tuple[torch.dtype | None, torch.amp.GradScaler | None]:
    want = {
        "bf16": torch.bfloat16,
        "bfloat16": torch.bfloat16,
        "fp16": torch.float16,
        "float16": torch.float16,
    }
    dtype = want.get(cfg.precision)
    if cfg.precision not in want and cfg.precision not in ("fp32", "float32"):
        raise ValueError(f"unknown precision {cfg.precision!r} (bf16, fp16, fp32)")
    if device.type == "cpu" and not cfg.cpu_autocast:
        # CPU autocast is slow and not what the ablation is about; say so instead of pretending.
        notes["precision"] = "fp32" + (f" (requested {cfg.precision}; cpu runs fp32)" if dtype else "")
        return None, None
    notes["precision"] = f"{cfg.precision} autocast" if dtype else "fp32"
    scaler = torch.amp.GradScaler(device.type) if dtype is torch.float16 else None
    return dtype, scaler


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_steps(trainer: Trainer) -> Iterator[tuple[int, float, float]]:
    """Yield (step number from 1, step seconds, loss) for warm-up + measured steps."""
    for i in range(trainer.cfg.total_steps):
        _sync(trainer.device)
        t0 = time.perf_counter()
        loss = trainer.step(i)
        _sync(trainer.device)
        dt = time.perf_counter() - t0
        yield i + 1, dt, float(loss.item())


def peak_memory_gib(device: torch.device) -> tuple[float, float | None]:
    """(peak allocated, peak reserved) on GPU; (peak RSS of this process, None) on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / GIB, torch.cuda.max_memory_reserved(device) / GIB
    return peak_rss_bytes() / GIB, None


def peak_rss_bytes() -> int:
    """This process's own peak resident set size.

    Linux: ``VmHWM``, the high-water mark of this process's address space. Not ``ru_maxrss``: Linux
    carries that across fork and exec, so a run started by a large parent (a Ray worker, pytest)
    would report the parent's RSS instead of its own.
    """
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def _reduce(values: list[float], op: dist.ReduceOp.RedOpType, device: torch.device) -> list[float]:
    if not dist.is_initialized():
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=op)
    return t.tolist()


def compile_time_s(times: Sequence[float], warmup_steps: int) -> float | None:
    """Seconds the steps before measurement took beyond a normal step (docs/runners.md).

    The sum over the warm-up steps of ``max(0, t - m)``, ``m`` the median of the steps after them:
    what compilation (and first-touch allocation) cost on top of the work of those steps. With no
    warm-up step the first step stands in for them. None when no later step gives ``m``.
    """
    head = max(1, warmup_steps)
    if len(times) <= head:
        return None
    normal = statistics.median(times[head:])
    return sum(max(0.0, t - normal) for t in times[:head])


def run_training(cfg: TrainConfig, emit: Emit, device: torch.device, backend: str | None) -> dict[str, Any]:
    """Train and measure one rank; returns {"metrics", "series", "provenance"} (RunResult fields)."""
    trainer = build_trainer(cfg, device)
    world = cfg.world_size
    tokens_global = cfg.tokens_per_step_per_rank * world
    steps: list[int] = []
    times: list[float] = []
    losses: list[float] = []
    for step, dt, loss in timed_steps(trainer):
        steps.append(step)
        times.append(dt)
        losses.append(loss)
        emit(
            {
                "event": "step",
                "step": step,
                "total": cfg.total_steps,
                "warmup": step <= cfg.warmup_steps,
                "step_time_s": dt,
                "tokens_per_s": tokens_global / dt,
                "loss": loss,
            }
        )
    # A data-parallel step is as slow as its slowest rank.
    times = _reduce(times, dist.ReduceOp.MAX, device)
    losses = [x / world for x in _reduce(losses, dist.ReduceOp.SUM, device)]
    peak, reserved = peak_memory_gib(device)
    peak, reserved_m = _reduce([peak, reserved or 0.0], dist.ReduceOp.MAX, device)
    measured = times[cfg.warmup_steps :]
    step_time = statistics.median(measured)
    tps = tokens_global / step_time
    fpt = flops.flops_per_token(cfg.model, trainer.n_non_embedding, cfg.seq_len)
    tflops = flops.achieved_tflops(fpt, tps / world)
    metrics: dict[str, tuple[float, str]] = {
        "throughput_tokens_per_s": (tps, "tokens/s"),
        "throughput_tokens_per_s_per_device": (tps / world, "tokens/s/device"),
        "throughput_samples_per_s": (cfg.micro_batch * cfg.grad_accum * world / step_time, "samples/s"),
        "step_time_s": (step_time, "s"),
        "tflops_per_device": (tflops, "TFLOPS"),
        "peak_memory_gib": (peak, "GiB"),
        "loss": (losses[-1], "1"),
    }
    # Only a compiled run has a compile time; an eager run's warm-up is not reported as one.
    compiled = compile_time_s(times, cfg.warmup_steps) if cfg.compile else None
    if compiled is not None:
        metrics["compile_time_s"] = (compiled, "s")
    ratio = flops.mfu(tflops, cfg.peak_tflops_per_device)
    if ratio is not None:
        metrics["mfu"] = (ratio, "ratio")
    if reserved is not None:
        metrics["peak_memory_reserved_gib"] = (reserved_m, "GiB")
    series = {"step_time_s": (steps, times), "loss": (steps, losses)}
    provenance = _provenance(cfg, trainer, device, backend, fpt)
    return {"metrics": metrics, "series": series, "provenance": provenance}


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _advisor_provenance(cfg: TrainConfig, device: torch.device) -> dict[str, str]:
    m = cfg.model
    return {
        "ckpt_layers": str(cfg.ckpt_layers),
        "model_layers": str(m.n_layers),
        "model_dim": str(m.dim),
        "model_heads": str(m.n_heads),
        "model_kv_heads": str(m.kv_heads),
        "model_ffn": str(m.hidden),
        "model_vocab": str(m.vocab_size),
        "model_tied": str(m.tie_embeddings).lower(),
        "model_gated_mlp": "true",  # SwiGLU
        "seq_len": str(cfg.seq_len),
        "micro_batch": str(cfg.micro_batch),
        "precision_requested": cfg.precision,
        "attention": "sdpa",  # F.scaled_dot_product_attention: no score matrix kept for backward
        "peak_memory_measure": (
            "torch.cuda.max_memory_allocated (peak_memory_reserved_gib: max_memory_reserved)"
            if device.type == "cuda"
            else "VmHWM: peak resident set of the run process"
        ),
    }


def _provenance(
    cfg: TrainConfig, trainer: Trainer, device: torch.device, backend: str | None, fpt: float
) -> dict[str, str]:
    m = cfg.model
    prov = {
        "runner": DEFAULT_RUNNER,  # this is the built-in runner
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_model(),
        "device_type": device.type,
        "torch_threads": str(torch.get_num_threads()),
        "model": cfg.model_name,
        "model_shape": (
            f"dim={m.dim} layers={m.n_layers} heads={m.n_heads} kv_heads={m.kv_heads} "
            f"ffn={m.hidden} vocab={m.vocab_size} tied={m.tie_embeddings}"
        ),
        "non_embedding_params": str(trainer.n_non_embedding),
        "flops_per_token": f"{fpt:.6g}",
        "activation_checkpointing": f"{cfg.ckpt_layers}/{m.n_layers} layers",
        # What the checkpointing advisor reads (backend/services/advice.py): k, the shape, the memory measure.
        **_advisor_provenance(cfg, device),
        "compile": trainer.notes.get("compile", "eager"),
        "precision": trainer.notes.get("precision", cfg.precision),
        "world_size": str(cfg.world_size),
        "grad_accum": str(cfg.grad_accum),
        "zero_stage": str(cfg.zero_stage),
        "warmup_steps": str(cfg.warmup_steps),
        "measured_steps": str(cfg.measured_steps),
    }
    if backend:
        prov["distributed_backend"] = backend
    if device.type == "cuda":
        prov["cuda"] = str(torch.version.cuda)
        if backend == "nccl":
            with contextlib.suppress(Exception):
                prov["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return prov
