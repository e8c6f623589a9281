"""The runs the advisor reads: a cluster's succeeded runs by workload, each as an observation of the
model (its k, group, peak memory and step time), and the run-to-run noise of its repeated cells."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.analysis import checkpointing as model
from ablate.backend.db.models import Cluster, Release, Run, RunMetric, RunStatus, Variant, Workload
from ablate.backend.domain.factors import normalize_factor
from ablate.backend.services.advice.result import UsedRun
from ablate.backend.services.advice.shapes import TORCH_LLM, to_bool, to_int
from ablate.backend.services.comparison.loading import NOT_EXCLUDED

MEMORY_METRICS = ("peak_memory_reserved_gib", "peak_memory_gib")
_FRACTION = re.compile(r"^\s*(\d+)\s*/\s*(\d+)")


@dataclass(frozen=True)
class StoredRun:
    """What the advisor reads of one succeeded run."""

    id: int
    workload_id: int
    release_id: int
    release: str
    variant: Variant
    provenance: dict[str, Any]
    environment: dict[str, Any]
    metrics: dict[str, float]


class ClusterRuns:
    """The succeeded runs of one cluster, by workload: three queries, whatever the number of runs
    (runs, the metrics the advisor reads, their releases and variants), loaded once per cluster."""

    def __init__(self, session: Session, cluster: Cluster) -> None:
        ok = (Run.cluster_id == cluster.id, Run.status == RunStatus.succeeded.value, NOT_EXCLUDED)
        rows = session.execute(
            select(Run.id, Run.workload_id, Run.release_id, Run.variant_id, Run.provenance, Run.environment)
            .where(*ok)
            .order_by(Run.id)
        ).all()
        metrics: dict[int, dict[str, float]] = {}
        for run_id, name, value in session.execute(
            select(RunMetric.run_id, RunMetric.name, RunMetric.value)
            .join(Run, RunMetric.run_id == Run.id)
            .where(*ok, RunMetric.name.in_([*MEMORY_METRICS, "step_time_s"]))
        ):
            metrics.setdefault(run_id, {})[name] = value
        variants = {
            v.id: v for v in session.scalars(select(Variant).where(Variant.id.in_({r[3] for r in rows})))
        }
        releases = {
            r.id: r.ref for r in session.scalars(select(Release).where(Release.id.in_({r[2] for r in rows})))
        }
        self.by_workload: dict[int, list[StoredRun]] = {}
        for run_id, workload_id, release_id, variant_id, prov, env in rows:
            run = StoredRun(
                run_id, workload_id, release_id, releases[release_id], variants[variant_id],
                dict(prov or {}), dict(env or {}), metrics.get(run_id, {}),
            )  # fmt: skip
            self.by_workload.setdefault(workload_id, []).append(run)
        self._observed: dict[int, tuple[list[model.Observation], list[UsedRun], list[tuple[int, str]]]] = {}
        self._noise: dict[int, model.Noise] = {}

    def noise(self, workload_id: int) -> model.Noise:
        """The noise priors for advice on ``workload_id``: the run-to-run spread of peak memory and
        step time pooled over the repeated cells (workload, release, variant, recorded k) of the
        cluster's other workloads. The workload's own repeats are left out: they reach the fit
        through its residuals, and counting them twice would shorten its intervals."""
        if workload_id not in self._noise:
            memory: dict[tuple[Any, ...], list[float]] = {}
            time: dict[tuple[Any, ...], list[float]] = {}
            for wid, runs in self.by_workload.items():
                if wid == workload_id:
                    continue
                for run in runs:
                    cell = (wid, run.release_id, run.variant.id, str(run.provenance.get("ckpt_layers")))
                    metric = next((m for m in MEMORY_METRICS if m in run.metrics), None)
                    if metric is not None:
                        memory.setdefault((*cell, metric), []).append(run.metrics[metric])
                    if "step_time_s" in run.metrics:
                        time.setdefault(cell, []).append(run.metrics["step_time_s"])
            self._noise[workload_id] = model.Noise(
                memory=model.pooled_noise(memory.values()),
                time=model.pooled_noise(
                    time.values(),
                    prior_rel=model.Noise().time.prior_rel,
                    prior_dof=model.Noise().time.prior_dof,
                ),
            )
        return self._noise[workload_id]

    def observe(
        self, workload: Workload, n_layers: int
    ) -> tuple[list[model.Observation], list[UsedRun], list[tuple[int, str]]]:
        """The workload's runs as observations, with what was used and what was skipped (memoised:
        a release's advice looks at every other workload of the cluster once per workload)."""
        if workload.id not in self._observed:
            obs: list[model.Observation] = []
            used: list[UsedRun] = []
            skipped: list[tuple[int, str]] = []
            for run in self.by_workload.get(workload.id, []):
                seen = _observe(run, workload, n_layers)
                if isinstance(seen, str):
                    skipped.append((run.id, seen))
                else:
                    obs.append(seen[0])
                    used.append(seen[1])
            self._observed[workload.id] = (obs, used, skipped)
        return self._observed[workload.id]


def run_ckpt_layers(run: StoredRun, workload: Workload, n_layers: int) -> int | None:
    """k of a run, from what it recorded, else from its variant (None when it cannot be told)."""
    prov, variant = run.provenance, run.variant
    k = to_int(prov.get("ckpt_layers"))
    if k is not None:
        return k
    match = _FRACTION.match(str(prov.get("activation_checkpointing", "")))
    if match:
        return int(match.group(1))
    factors = {normalize_factor(f) for f in variant.factors or []}
    env = {**(variant.env or {}), **run.environment}
    if "ckpt_opt" not in factors and not to_bool(env.get("CHECKPOINT_OPTIMIZATION")):
        return 0
    opts = {**(workload.runner_options or {}), **(variant.runner_options or {})}
    if "ckpt_layers" in opts:
        return to_int(opts["ckpt_layers"])
    return n_layers if (workload.runner or TORCH_LLM) == TORCH_LLM else None


def run_group(release: str, variant: Variant) -> str:
    """Runs that should agree apart from k: one release, one set of other factors."""
    others = sorted({normalize_factor(f) for f in variant.factors or []} - {"ckpt_opt"})
    return f"{release} [{', '.join(others) or 'no factors'}]"


def _observe(run: StoredRun, workload: Workload, n_layers: int) -> tuple[model.Observation, UsedRun] | str:
    """The run as an observation of the model, or why it cannot be one."""
    k = run_ckpt_layers(run, workload, n_layers)
    if k is None:
        return "its ckpt_layers is unknown (record ckpt_layers in its provenance)"
    if not 0 <= k <= n_layers:
        return f"its ckpt_layers {k} is outside 0..{n_layers}"
    values = run.metrics
    peak = next((values[m] for m in MEMORY_METRICS if m in values), None)
    step = values.get("step_time_s")
    if peak is None and step is None:
        return "it has neither peak memory nor step time"
    obs = model.Observation(run.id, k, run_group(run.release, run.variant), peak, step)
    used = UsedRun(
        id=run.id,
        release=run.release,
        variant=run.variant.name,
        workload=workload.name,
        ckpt_layers=k,
        peak_memory_gib=peak,
        step_time_s=step,
        group=obs.group,
    )
    return obs, used


def target_group(release: Release, runs: list[StoredRun]) -> str:
    """The group the advice is for: the release, with the factor set most of its runs used."""
    mine = Counter(run_group(r.release, r.variant) for r in runs if r.release_id == release.id)
    if mine:
        return sorted(mine.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    return f"{release.ref} [no factors]"
