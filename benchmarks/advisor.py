"""Prediction error of the checkpointing advisor on held-out real runs of the torch-llm runner (CPU).

For each shape, one run per k (the real child-process runner, peak RSS of the run process), then:

* leave-one-out: each k predicted from the runs at the other k values;
* ladder-like: only k = 0 and k = L measured (a Base and a CkptOpt rung), every k between predicted;
* prior only: the shape's analytical estimate, no run.

Reports the absolute error of the predicted peak in percent of the measured one, and whether the
95% prediction interval held the measurement; and the same for the throughput ratio against k = 0.

    .venv/bin/python benchmarks/advisor.py                 # the default shapes, 1 thread
    .venv/bin/python benchmarks/advisor.py --repeats 2     # two runs per k
    .venv/bin/python benchmarks/advisor.py --scale         # time of the report's advice at production size

Prints a Markdown table; not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablate.backend.analysis import checkpointing as model
from ablate.backend.db.models import Cluster, Workload
from ablate.backend.domain.runner import RunSpec, get_runner
from ablate.backend.services.advice import BASELINE_GIB, workload_shape


@dataclass(frozen=True)
class Shape:
    name: str
    preset: str
    n_layers: int
    seq_len: int
    micro_batch: int
    ks: tuple[int, ...]


SHAPES = (
    Shape("small-8l-s256-b16", "small", 8, 256, 16, (0, 2, 4, 6, 8)),
    Shape("small-12l-s256-b8", "small", 12, 256, 8, (0, 2, 4, 6, 8, 10, 12)),
)


def workload(shape: Shape) -> dict[str, object]:
    return {
        "name": shape.name,
        "model": shape.preset,
        "seq_len": shape.seq_len,
        "micro_batch": shape.micro_batch,
        "precision": "fp32",
        "warmup_steps": 1,
        "measured_steps": 2,
        "runner": "torch-llm",
        "runner_options": {"n_layers": shape.n_layers},
    }


def run_sweep(shape: Shape, repeats: int, log_dir: str) -> list[model.Observation]:
    runner = get_runner("torch-llm")
    out: list[model.Observation] = []
    for r in range(repeats):
        for k in shape.ks:
            spec = RunSpec(
                run_id=len(out) + 1,
                workload=workload(shape),
                variant={
                    "name": f"k={k}",
                    "factors": ["ckpt_opt"] if k else [],
                    "runner_options": {"ckpt_layers": k},
                },
                cluster={"name": "cpu", "accelerator": "cpu"},
                env={"OMP_NUM_THREADS": "1"},
                log_dir=log_dir,
                timeout_s=600,
            )
            res = runner.run(spec)
            if not res.succeeded:
                raise SystemExit(f"{shape.name} k={k} repeat {r}: {res.error}\n{res.log_tail}")
            out.append(
                model.Observation(
                    spec.run_id, k, "cpu", res.metrics["peak_memory_gib"][0], res.metrics["step_time_s"][0]
                )
            )
    return out


def prior_of(shape: Shape) -> model.MemoryPrior:
    w = workload(shape)
    orm = Workload(
        name=shape.name, model=shape.preset, seq_len=shape.seq_len, micro_batch=shape.micro_batch,
        precision="fp32", runner="torch-llm", runner_options=w["runner_options"], tensor_parallel=1,
        pipeline_parallel=1, data_parallel=1,
    )  # fmt: skip
    cpu = Cluster(name="cpu", accelerator="cpu", nodes=1, devices_per_node=1)
    s, _ = workload_shape(orm, cpu)
    base, sd = BASELINE_GIB["cpu"]
    return model.memory_prior(s, baseline_gib=base, baseline_sd_gib=sd)


@dataclass
class Score:
    errors: list[float]
    covered: list[bool]
    ratio_errors: list[float]
    ratio_covered: list[bool]

    def row(self, label: str, shape: str) -> str:
        n = len(self.errors)
        mean = statistics.fmean(self.errors) if n else float("nan")
        worst = max(self.errors) if n else float("nan")
        cov = sum(self.covered)
        ratio = statistics.fmean(self.ratio_errors) if self.ratio_errors else float("nan")
        rcov = sum(self.ratio_covered)
        return (
            f"| {shape} | {label} | {n} | {mean:.1f}% | {worst:.1f}% | {cov}/{n} | "
            f"{ratio:.1f}% | {rcov}/{len(self.ratio_covered)} |"
        )


def score(
    prior: model.MemoryPrior, train: list[model.Observation], test: list[model.Observation], t0: float
) -> Score:
    advice = model.recommend(prior, train, device_memory_gib=1000.0, target_group="cpu")
    s = Score([], [], [], [])
    for o in test:
        row = advice.table[o.ckpt_layers]
        assert o.peak_memory_gib is not None and o.step_time_s is not None
        s.errors.append(abs(row.peak_memory_gib - o.peak_memory_gib) / o.peak_memory_gib * 100)
        s.covered.append(row.low_gib <= o.peak_memory_gib <= row.high_gib)
        if o.ckpt_layers:
            measured = t0 / o.step_time_s
            s.ratio_errors.append(abs(row.throughput_ratio - measured) / measured * 100)
            s.ratio_covered.append(row.throughput_ratio_low <= measured <= row.throughput_ratio_high)
    return s


def split(
    obs: list[model.Observation], held: set[int]
) -> tuple[list[model.Observation], list[model.Observation]]:
    """(runs to fit on, runs at the held-out k values)."""
    return [o for o in obs if o.ckpt_layers not in held], [o for o in obs if o.ckpt_layers in held]


def merge(scores: list[Score]) -> Score:
    return Score(
        [e for s in scores for e in s.errors],
        [c for s in scores for c in s.covered],
        [e for s in scores for e in s.ratio_errors],
        [c for s in scores for c in s.ratio_covered],
    )


def scale(
    workloads: int = 20, variants: int = 5, repeats: int = 5, releases: int = 11, reps: int = 5
) -> None:
    """Seconds of ``release_advice`` (what the report and the release page add) on a SQLite
    database of ``releases`` x ``workloads`` x ``variants`` x ``repeats`` runs, the size
    benchmarks/report.py uses; every workload a llama-1b shape with its own micro-batch."""
    from ablate.backend.db import migrate
    from ablate.backend.db.database import Database
    from ablate.backend.schemas.results import ResultsBatch
    from ablate.backend.services.advice import release_advice
    from ablate.backend.services.ingest import submit_results

    with tempfile.TemporaryDirectory() as tmp:
        db = Database.from_url(f"sqlite:///{tmp}/scale.sqlite")
        migrate.upgrade(db.engine)
        cluster = {"name": "h200-1x8", "accelerator": "gpu", "device_model": "H200", "devices_per_node": 8}
        for t in range(releases):
            rows = []
            for w in range(workloads):
                wl = {
                    "name": f"llama-1b-mb{w + 1}",
                    "model": "llama-1b",
                    "seq_len": 4096,
                    "micro_batch": w + 1,
                }
                for v in range(variants):
                    k = 16 if v == variants - 1 else 0
                    variant = {"name": f"V{v}", "factors": ["ckpt_opt"] if k else []}
                    for r in range(repeats):
                        peak = 20 + (w + 1) * (1.5 * max(16 - k, 1) + 0.06 * k) * (1 + 0.003 * r)
                        metrics = {"peak_memory_gib": peak, "step_time_s": 1.0 + 0.02 * k + 0.001 * r}
                        rows.append({"release": {"image": "scale", "tag": f"1.{t}", "platform": "gpu"},
                                     "cluster": cluster, "workload": wl, "variant": variant, "repeat": r,
                                     "metrics": metrics})  # fmt: skip
            with db.transaction() as session:
                batch = ResultsBatch.model_validate({"results": rows})
                submit_results(session, batch, token_scope="admin", idempotency_key=None)
        times, cpu = [], []
        for _ in range(reps):
            t0, c0 = time.perf_counter(), time.process_time()
            with db.read() as session:
                advice = release_advice(session, f"scale:1.{releases - 1}")
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        db.dispose()
    n = releases * workloads * variants * repeats
    print(
        f"release_advice over {n} runs, {len(advice.items)} workloads advised: median wall "
        f"{statistics.median(times) * 1000:.0f} ms, CPU {statistics.median(cpu) * 1000:.0f} ms ({reps} reps)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument(
        "--scale", action="store_true", help="Time the report's advice at production size instead."
    )
    ap.add_argument("--save", type=Path, help="Write the measured runs here (JSON).")
    ap.add_argument("--load", type=Path, help="Score runs measured before (JSON from --save) instead.")
    args = ap.parse_args()
    if args.scale:
        scale()
        return
    stored = json.loads(args.load.read_text()) if args.load else {}
    measured: dict[str, list[list[float]]] = {}
    rows = []
    raw = []
    with tempfile.TemporaryDirectory() as log_dir:
        for shape in SHAPES:
            t = time.perf_counter()
            if args.load:
                obs = [
                    model.Observation(i + 1, int(k), "cpu", m, st)
                    for i, (k, m, st) in enumerate(stored[shape.name])
                ]
            else:
                obs = run_sweep(shape, args.repeats, log_dir)
            measured[shape.name] = [
                [o.ckpt_layers, o.peak_memory_gib or 0.0, o.step_time_s or 0.0] for o in obs
            ]
            wall = time.perf_counter() - t
            prior = prior_of(shape)
            t0 = statistics.median(o.step_time_s or 0.0 for o in obs if o.ckpt_layers == 0)
            loo = merge([score(prior, *split(obs, {k}), t0) for k in shape.ks])
            ends = {0, shape.n_layers}
            ladder = score(prior, *split(obs, set(shape.ks) - ends), t0)
            alone = score(prior, [], obs, t0)
            rows += [loo.row("leave one k out", shape.name), ladder.row("k = 0 and L only", shape.name)]
            rows.append(alone.row("prior only", shape.name))
            for o in obs:
                cells = (o.peak_memory_gib, prior.peak_gib(o.ckpt_layers), o.step_time_s)
                raw.append(
                    f"| {shape.name} | {o.ckpt_layers} | " + " | ".join(f"{v:.3f}" for v in cells) + " |"
                )
            print(f"{shape.name}: {len(obs)} runs in {wall:.0f} s", file=sys.stderr)
    if args.save:
        args.save.write_text(json.dumps(measured, indent=1))
    print(
        "| shape | fitted on | predictions | mean abs error | max | in 95% PI | ratio error | ratio in CI |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("| shape | k | measured peak GiB | prior GiB | step time s |")
    print("|---|---|---|---|---|")
    print("\n".join(raw))


if __name__ == "__main__":
    main()
