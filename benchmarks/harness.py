"""Overhead of the torch-llm runner's measurement versus a bare PyTorch training loop.

Both run in this process, on the same model, data and step count; each repetition builds both afresh
and alternates their order, and the figure per side is the median over repetitions of the median
measured step time. The runner should be within ~3% of the bare loop.

    .venv/bin/python benchmarks/harness.py --model small --seq-len 256 --batch 8 --reps 5
    .venv/bin/python benchmarks/harness.py --full-runner   # also the real child-process runner

Prints figures; not a test.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from ablate.backend.domain.runner import RunSpec, get_runner
from ablate.workers.runners.torch_llm.config import TrainConfig
from ablate.workers.runners.torch_llm.model import Transformer, lm_loss
from ablate.workers.runners.torch_llm.train import build_trainer, run_training


def make_spec(args: argparse.Namespace, log_dir: str) -> RunSpec:
    return RunSpec(
        run_id=0,
        workload={
            "name": "harness",
            "model": args.model,
            "seq_len": args.seq_len,
            "micro_batch": args.batch,
            "precision": "fp32",
            "warmup_steps": args.warmup,
            "measured_steps": args.steps,
            "runner": "torch-llm",
            "runner_options": {"data_batches": 4},
        },
        variant={"name": "Base", "factors": []},
        cluster={"name": "local", "accelerator": "gpu" if args.cuda else "cpu"},
        env={"OMP_NUM_THREADS": str(args.threads)},
        log_dir=log_dir,
        timeout_s=3600,
    )


def runner_step_time(cfg: TrainConfig, device: torch.device) -> float:
    sink = io.StringIO()  # the child writes events to stdout; keep that cost in the measurement
    out = run_training(cfg, lambda e: sink.write(json.dumps(e) + "\n"), device, None)
    return out["metrics"]["step_time_s"][0]


def bare_step_time(cfg: TrainConfig, device: torch.device) -> float:
    torch.manual_seed(cfg.seed)
    model = Transformer(cfg.model, cfg.seq_len).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, fused=device.type == "cuda")
    gen = torch.Generator().manual_seed(cfg.seed + 1000)
    batches = [
        torch.randint(cfg.model.vocab_size, (cfg.micro_batch, cfg.seq_len), generator=gen).to(device)
        for _ in range(cfg.data_batches)
    ]
    times = []
    for i in range(cfg.total_steps):
        x = batches[i % len(batches)]
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        lm_loss(model(x), x).backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[cfg.warmup_steps :])


def interleaved_cpu_times(cfg: TrainConfig, device: torch.device, steps: int) -> tuple[float, float]:
    """The runner's step function and a bare step, alternated step by step on CPU time: neighbours on a
    shared machine preempt us (wall time), but do not add CPU time to our process."""
    trainer = build_trainer(cfg, device)
    torch.manual_seed(cfg.seed)
    model = Transformer(cfg.model, cfg.seq_len).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)

    def bare(i: int) -> None:
        x = trainer.batches[i % len(trainer.batches)]
        opt.zero_grad(set_to_none=True)
        lm_loss(model(x), x).backward()
        opt.step()

    ours: list[float] = []
    theirs: list[float] = []
    for i in range(steps):
        pair = [(trainer.step, ours), (bare, theirs)]
        for fn, acc in pair if i % 2 else pair[::-1]:
            t0 = time.process_time()
            fn(i)
            acc.append(time.process_time() - t0)
    skip = cfg.warmup_steps
    return statistics.median(ours[skip:]), statistics.median(theirs[skip:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="small")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cuda", action="store_true", help="run on cuda:0 (bf16 off: fp32 on both sides)")
    ap.add_argument("--full-runner", action="store_true", help="also time TorchLLMRunner (fresh process)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    log_dir = tempfile.mkdtemp(prefix="ablate-harness-")
    spec = make_spec(args, log_dir)
    cfg = TrainConfig.from_spec(spec)
    device = torch.device("cuda", 0) if args.cuda else torch.device("cpu")
    runner_t, bare_t = [], []
    for rep in range(args.reps):
        order = [("runner", runner_step_time), ("bare", bare_step_time)]
        for name, fn in order if rep % 2 == 0 else order[::-1]:
            (runner_t if name == "runner" else bare_t).append(fn(cfg, device))
        print(
            f"rep {rep + 1}: runner {runner_t[-1] * 1e3:8.3f} ms   bare {bare_t[-1] * 1e3:8.3f} ms",
            flush=True,
        )
    r, b = statistics.median(runner_t), statistics.median(bare_t)
    m = cfg.model
    print(
        f"\nmodel {args.model} (dim {m.dim}, {m.n_layers} layers), seq_len {cfg.seq_len}, "
        f"batch {cfg.micro_batch}, {cfg.measured_steps} measured steps x {args.reps} reps, "
        f"{args.threads} thread(s), torch {torch.__version__}"
    )
    print(f"runner median step time: {r * 1e3:.3f} ms   (best rep {min(runner_t) * 1e3:.3f} ms)")
    print(f"bare   median step time: {b * 1e3:.3f} ms   (best rep {min(bare_t) * 1e3:.3f} ms)")
    print(f"ratio runner/bare:       {r / b:.4f}  ({(r / b - 1) * 100:+.2f}%)")
    # Other load on the machine only ever adds time, so the best reps are the least disturbed figures.
    print(f"ratio of best reps:      {min(runner_t) / min(bare_t):.4f}")
    if not args.cuda and args.threads == 1:
        ours, theirs = interleaved_cpu_times(cfg, device, steps=cfg.warmup_steps + 4 * cfg.measured_steps)
        print(
            f"step-interleaved CPU time: runner step {ours * 1e3:.3f} ms, bare {theirs * 1e3:.3f} ms, "
            f"ratio {ours / theirs:.4f}"
        )
    if args.full_runner:
        res = get_runner("torch-llm").run(spec)
        if res.succeeded:
            print(f"full runner (child process) step time: {res.metrics['step_time_s'][0] * 1e3:.3f} ms")
        else:
            print(f"full runner failed: {res.error}")


if __name__ == "__main__":
    main()
