"""The checkpointing advisor's service: the workload's shape, its measured runs on the cluster and
those of similar workloads, read from the database and handed to the pure model
(:mod:`ablate.backend.analysis.checkpointing`); the answer names every run it used.

Where the numbers come from (docs/advisor.md has the whole story):

* the **shape**: the workload's ``model`` when it names a torch-llm preset (``llama3-8b``,
  ``deepspeed/llama3-8b``, ...), overridden by its ``runner_options`` (``n_layers``, ``dim``,
  ``n_heads``, ``n_kv_heads``, ``vocab_size``, ``ffn_hidden``, ``gated_mlp``, ``attention``), else
  what its latest run recorded in its provenance (``model_layers``, ``model_dim``, ...);
* **k** of a run: its provenance ``ckpt_layers`` (torch-llm records it, so may CI), else its older
  ``activation_checkpointing: "k/L layers"``, else the variant: no ``ckpt_opt`` means 0, with
  ``ckpt_opt`` the ``ckpt_layers`` runner option, torch-llm's default being all layers;
* **peak memory** of a run: ``peak_memory_reserved_gib`` where recorded (what the allocator really
  holds on a GPU), else ``peak_memory_gib``;
* the **device memory**: ``memory_gib`` as given, else the cluster's ``memory_gib`` label, else a
  table of device models.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.analysis import checkpointing as model
from ablate.backend.db.models import Cluster, Release, Run, RunMetric, RunStatus, Variant, Workload
from ablate.backend.domain.factors import normalize_factor
from ablate.backend.domain.model_shapes import PRESETS, resolve_model
from ablate.backend.services import catalog
from ablate.backend.services.comparison.loading import NOT_EXCLUDED
from ablate.backend.services.errors import ValidationProblem

TORCH_LLM = "torch-llm"
MEMORY_METRICS = ("peak_memory_reserved_gib", "peak_memory_gib")
# Usable memory of one device in GiB (what torch.cuda reports as total), by device model.
DEVICE_MEMORY_GIB: dict[str, float] = {
    "h200": 139.8,
    "h100": 79.2,
    "h800": 79.2,
    "h20": 94.9,
    "a100": 79.2,
    "a800": 79.2,
    "l40": 44.4,
    "l20": 44.4,
}
# What a process holds before the model: python and torch in a CPU run's RSS; on a GPU the
# allocator's own (the CUDA context is not in torch's peak numbers).
BASELINE_GIB = {"cpu": (0.35, 0.25), "gpu": (0.0, 0.5), "ppu": (0.0, 0.5)}
_FRACTION = re.compile(r"^\s*(\d+)\s*/\s*(\d+)")


@dataclass(frozen=True)
class UsedRun:
    id: int
    release: str
    variant: str
    workload: str
    ckpt_layers: int
    peak_memory_gib: float | None
    step_time_s: float | None
    group: str = ""


@dataclass(frozen=True)
class CheckpointingAdvice:
    """The advice with its context: which release, cluster and workload, the shape, the runs used."""

    release: str
    cluster: str
    workload: str
    shape: model.ModelShape
    shape_source: str
    device_memory_source: str
    target_group: str
    advice: model.Advice
    runs: tuple[UsedRun, ...]
    similar_runs: tuple[UsedRun, ...]
    skipped_runs: tuple[tuple[int, str], ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        a = self.advice
        chosen = a.chosen
        return {
            "release": self.release,
            "cluster": self.cluster,
            "workload": self.workload,
            "n_layers": a.n_layers,
            "recommended_ckpt_layers": a.recommended_ckpt_layers,
            "fits": a.fits,
            "shortfall_gib": a.shortfall_gib,
            "message": a.message,
            "basis": a.basis,
            "level": a.level,
            "device_memory_gib": a.device_memory_gib,
            "device_memory_source": self.device_memory_source,
            "utilisation": a.utilisation,
            "memory_budget_gib": a.memory_budget_gib,
            "evaluated_ckpt_layers": chosen.ckpt_layers,
            "predicted_peak_memory_gib": {
                "value": chosen.peak_memory_gib,
                "low": chosen.low_gib,
                "high": chosen.high_gib,
            },
            "predicted_throughput_ratio": {
                "value": chosen.throughput_ratio,
                "low": chosen.throughput_ratio_low,
                "high": chosen.throughput_ratio_high,
            },
            "run_ids": {
                "memory": list(a.memory_run_ids),
                "step_time": list(a.time_run_ids),
                "similar": list(a.similar_run_ids),
            },
            "similar_workloads": list(a.similar_workloads),
            "runs": [_run_json(r) for r in self.runs],
            "similar_runs": [_run_json(r) for r in self.similar_runs],
            "skipped_runs": [{"id": i, "reason": why} for i, why in self.skipped_runs],
            "target_group": self.target_group,
            "shape": {**_shape_json(self.shape), "source": self.shape_source},
            "prior": _prior_json(a.prior),
            "memory_fit": _fit_json(a.memory_fit),
            "step_time_fit": _fit_json(a.time_fit),
            "notes": [*a.notes, *self.notes],
            "table": [
                {
                    "ckpt_layers": row.ckpt_layers,
                    "peak_memory_gib": row.peak_memory_gib,
                    "low_gib": row.low_gib,
                    "high_gib": row.high_gib,
                    "fits": row.fits,
                    "throughput_ratio": row.throughput_ratio,
                    "throughput_ratio_low": row.throughput_ratio_low,
                    "throughput_ratio_high": row.throughput_ratio_high,
                    "measured_peak_memory_gib": list(row.measured_peak_gib),
                    "measured_step_time_s": list(row.measured_step_time_s),
                }
                for row in a.table
            ],
        }


def _run_json(r: UsedRun) -> dict[str, Any]:
    return {
        "id": r.id,
        "release": r.release,
        "variant": r.variant,
        "workload": r.workload,
        "ckpt_layers": r.ckpt_layers,
        "peak_memory_gib": r.peak_memory_gib,
        "step_time_s": r.step_time_s,
        "group": r.group,
    }


def _shape_json(s: model.ModelShape) -> dict[str, Any]:
    return {
        "n_layers": s.n_layers,
        "hidden": s.hidden,
        "n_heads": s.n_heads,
        "n_kv_heads": s.kv_heads,
        "ffn_hidden": s.ffn,
        "gated_mlp": s.gated_mlp,
        "vocab_size": s.vocab_size,
        "tie_embeddings": s.tie_embeddings,
        "seq_len": s.seq_len,
        "micro_batch": s.micro_batch,
        "precision": s.precision,
        "weights_fp32": s.weights_fp32,
        "attention": s.attention,
        "tensor_parallel": s.tensor_parallel,
        "pipeline_parallel": s.pipeline_parallel,
        "data_parallel": s.data_parallel,
        "zero_stage": s.zero_stage,
        "n_params": s.n_params,
    }


def _prior_json(p: model.MemoryPrior) -> dict[str, Any]:
    return {
        "weights_gib": p.weights_gib,
        "gradients_gib": p.gradients_gib,
        "optimizer_gib": p.optimizer_gib,
        "head_gib": p.head_gib,
        "baseline_gib": p.baseline_gib,
        "layer_activation_gib": p.layer_activation_gib,
        "layer_checkpointed_gib": p.layer_checkpointed_gib,
        "recompute_fraction": p.recompute_fraction,
        "peak_k0_gib": p.peak_gib(0),
        "peak_all_gib": p.peak_gib(p.n_layers),
    }


def _fit_json(f: model.LinearFit) -> dict[str, Any]:
    return {
        "parameters": dict(zip(f.names, f.mean, strict=True)),
        "sd": dict(zip(f.names, (math.sqrt(max(f.cov[i][i], 0.0)) for i in range(len(f.mean))), strict=True)),
        "sigma": f.sigma,
        "dof": None if math.isinf(f.dof) else f.dof,
        "n": f.n,
    }


# Shapes ------------------------------------------------------------------------------------------


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _bool(value: Any) -> bool:
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


def _preset_key(name: str | None) -> str | None:
    key = (name or "").split("/")[-1].lower()
    return key if key in PRESETS else None


def workload_shape(
    workload: Workload, cluster: Cluster, provenance: dict[str, Any] | None = None
) -> tuple[model.ModelShape, str]:
    """The shape of ``workload`` on ``cluster`` and where it came from; raises ValidationProblem
    (422) naming what is missing, e.g. a workload without a layer count."""
    opts = dict(workload.runner_options or {})
    prov = provenance or {}
    runner = workload.runner or TORCH_LLM
    dims: dict[str, Any] = {}
    source = "runner_options"
    preset = _preset_key(workload.model)
    if preset is not None:
        try:
            cfg = resolve_model(preset, opts)
        except (TypeError, ValueError) as exc:
            raise ValidationProblem.at("workload", f"workload {workload.name!r}: {exc}") from None
        dims = {
            "n_layers": cfg.n_layers,
            "hidden": cfg.dim,
            "n_heads": cfg.n_heads,
            "n_kv_heads": cfg.kv_heads,
            "vocab_size": cfg.vocab_size,
            "ffn_hidden": cfg.hidden,
            "tie_embeddings": cfg.tie_embeddings,
            "gated_mlp": True,
        }
        source = f"torch-llm preset {preset}" + (" with runner_options" if opts else "")
    else:
        named = {
            "n_layers": opts.get("n_layers"),
            "hidden": opts.get("dim", opts.get("hidden_size")),
            "n_heads": opts.get("n_heads"),
            "n_kv_heads": opts.get("n_kv_heads"),
            "vocab_size": opts.get("vocab_size"),
            "ffn_hidden": opts.get("ffn_hidden"),
        }
        from_prov = {
            "n_layers": prov.get("model_layers"),
            "hidden": prov.get("model_dim"),
            "n_heads": prov.get("model_heads"),
            "n_kv_heads": prov.get("model_kv_heads"),
            "vocab_size": prov.get("model_vocab"),
            "ffn_hidden": prov.get("model_ffn"),
        }
        if named["n_layers"] is None and from_prov["n_layers"] is not None:
            named, source = from_prov, "provenance of its latest run"
        dims = {k: _int(v) for k, v in named.items()}
        dims["gated_mlp"] = _bool(opts.get("gated_mlp", prov.get("model_gated_mlp", "false")))
        dims["tie_embeddings"] = _bool(opts.get("tie_embeddings", prov.get("model_tied", "false")))
    if not dims.get("n_layers"):
        raise ValidationProblem.at(
            "workload",
            f"workload {workload.name!r} has no layer count: give it a torch-llm preset as model "
            f"({', '.join(sorted(PRESETS))}), or runner_options n_layers, dim, n_heads and vocab_size",
        )
    missing = [k for k in ("hidden", "n_heads", "vocab_size") if not dims.get(k)]
    if missing:
        raise ValidationProblem.at(
            "workload",
            f"workload {workload.name!r} lacks {', '.join(missing)} (runner_options or provenance)",
        )
    seq = workload.seq_len or _int(prov.get("seq_len")) or (128 if runner == TORCH_LLM else None)
    if not seq:
        raise ValidationProblem.at("workload", f"workload {workload.name!r} has no seq_len")
    micro = workload.micro_batch or _int(prov.get("micro_batch")) or 1
    precision = str(workload.precision or prov.get("precision_requested") or "bf16").lower()
    cpu_fp32 = runner == TORCH_LLM and cluster.accelerator == "cpu" and not _bool(opts.get("cpu_autocast"))
    attention = str(
        opts.get("attention") or prov.get("attention") or ("sdpa" if runner == TORCH_LLM else "flash")
    )
    tp, pp = workload.tensor_parallel or 1, workload.pipeline_parallel or 1
    world = max(1, cluster.nodes * max(1, cluster.devices_per_node))
    dp = workload.data_parallel if (workload.data_parallel or 1) > 1 else max(1, world // (tp * pp))
    shape = model.ModelShape(
        n_layers=int(dims["n_layers"]),
        hidden=int(dims["hidden"]),
        n_heads=int(dims["n_heads"]),
        n_kv_heads=dims.get("n_kv_heads") or None,
        vocab_size=int(dims["vocab_size"]),
        ffn_hidden=dims.get("ffn_hidden") or None,
        gated_mlp=bool(dims.get("gated_mlp")),
        tie_embeddings=bool(dims.get("tie_embeddings")),
        seq_len=int(seq),
        micro_batch=int(micro),
        precision="fp32" if cpu_fp32 else precision,
        weights_fp32=runner == TORCH_LLM,  # autocast over fp32 weights
        attention=attention,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        data_parallel=dp,
        zero_stage=workload.zero_stage or 0,
    )
    problems = shape.problems()
    if problems:
        raise ValidationProblem.at("workload", f"workload {workload.name!r}: {problems[0]}")
    return shape, source


def device_memory(cluster: Cluster, memory_gib: float | None) -> tuple[float, str]:
    if memory_gib is not None:
        if not (math.isfinite(memory_gib) and memory_gib > 0):
            raise ValidationProblem.at("memory_gib", f"must be a positive number of GiB, got {memory_gib}")
        return memory_gib, "given"
    if cluster.device_memory_gib is not None:
        return cluster.device_memory_gib, f"cluster {cluster.name} definition"
    # A memory_gib label still counts (older setups), though a label also selects Ray nodes.
    labels = cluster.labels or {}
    for key in ("memory_gib", "device_memory_gib"):
        if key in labels:
            try:
                value = float(labels[key])
            except (TypeError, ValueError):
                value = -1.0
            if not (math.isfinite(value) and value > 0):
                raise ValidationProblem.at(
                    "cluster", f"cluster label {key}={labels[key]!r} is not a positive number"
                )
            return value, f"cluster label {key}"
    device = (cluster.device_model or "").lower()
    for name, gib in DEVICE_MEMORY_GIB.items():
        if name in device:
            return gib, f"device model {cluster.device_model}"
    raise ValidationProblem.at(
        "memory_gib",
        f"the memory of a device of cluster {cluster.name!r} is not known: pass memory_gib "
        "(or give the cluster definition device_memory_gib)",
    )


# Runs --------------------------------------------------------------------------------------------


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
    k = _int(prov.get("ckpt_layers"))
    if k is not None:
        return k
    match = _FRACTION.match(str(prov.get("activation_checkpointing", "")))
    if match:
        return int(match.group(1))
    factors = {normalize_factor(f) for f in variant.factors or []}
    env = {**(variant.env or {}), **run.environment}
    if "ckpt_opt" not in factors and not _bool(env.get("CHECKPOINT_OPTIMIZATION")):
        return 0
    opts = {**(workload.runner_options or {}), **(variant.runner_options or {})}
    if "ckpt_layers" in opts:
        return _int(opts["ckpt_layers"])
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
    used = UsedRun(run.id, run.release, run.variant.name, workload.name, k, peak, step, obs.group)
    return obs, used


def _target_group(release: Release, runs: list[StoredRun]) -> str:
    """The group the advice is for: the release, with the factor set most of its runs used."""
    mine = Counter(run_group(r.release, r.variant) for r in runs if r.release_id == release.id)
    if mine:
        return sorted(mine.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    return f"{release.ref} [no factors]"


def checkpointing_advice(
    session: Session,
    release_ref: str,
    cluster_name: str,
    workload_name: str,
    *,
    memory_gib: float | None = None,
    utilisation: float = model.DEFAULT_UTILISATION,
) -> CheckpointingAdvice:
    """How many layers of ``workload`` to checkpoint on ``cluster`` for ``release``.

    Unknown release, cluster or workload: NotFound (404). A budget <= 0, a utilisation outside
    (0, 1], a workload without a layer count: ValidationProblem (422).
    """
    if not (math.isfinite(utilisation) and 0 < utilisation <= 1):
        raise ValidationProblem.at("utilisation", f"must be in (0, 1], got {utilisation}")
    if memory_gib is not None and not (math.isfinite(memory_gib) and memory_gib > 0):
        raise ValidationProblem.at("memory_gib", f"must be a positive number of GiB, got {memory_gib}")
    release = catalog.get_release(session, release_ref, "release")
    cluster = catalog.get_named(session, Cluster, cluster_name, "cluster")
    workload = catalog.get_named(session, Workload, workload_name, "workload")
    return _advise(
        session, release, cluster, workload, ClusterRuns(session, cluster), memory_gib, utilisation
    )


def _advise(
    session: Session,
    release: Release,
    cluster: Cluster,
    workload: Workload,
    data: ClusterRuns,
    memory_gib: float | None,
    utilisation: float,
) -> CheckpointingAdvice:
    runs = data.by_workload.get(workload.id, [])
    shape, source = workload_shape(workload, cluster, runs[-1].provenance if runs else None)
    gib, memory_source = device_memory(cluster, memory_gib)
    baseline, baseline_sd = BASELINE_GIB.get(cluster.accelerator, (0.0, 0.5))
    prior = model.memory_prior(shape, baseline_gib=baseline, baseline_sd_gib=baseline_sd)

    observations, used, skipped = data.observe(workload, shape.n_layers)

    similar, similar_used = _similar_workloads(session, cluster, workload, shape, data, baseline, baseline_sd)
    target = _target_group(release, runs)
    try:
        advice = model.recommend(
            prior, observations, device_memory_gib=gib, utilisation=utilisation, target_group=target,
            similar=similar,
        )  # fmt: skip
    except ValueError as exc:
        raise ValidationProblem.at("memory_gib", str(exc)) from None
    notes = []
    if shape.attention == "flash" and "attention" not in (workload.runner_options or {}):
        notes.append("attention kind not stated: flash assumed (runner_options attention: eager if not)")
    if not any(r.release_id == release.id for r in runs) and runs:
        notes.append(f"no run of {release.ref} yet: its offset from the other releases is unknown")
    in_fit = set(advice.memory_run_ids) | set(advice.time_run_ids)
    similar_ids = set(advice.similar_run_ids)
    return CheckpointingAdvice(
        release=release.ref,
        cluster=cluster.name,
        workload=workload.name,
        shape=shape,
        shape_source=source,
        device_memory_source=memory_source,
        target_group=target,
        advice=advice,
        runs=tuple(u for u in used if u.id in in_fit),
        similar_runs=tuple(u for u in similar_used if u.id in similar_ids),
        skipped_runs=tuple(skipped),
        notes=tuple(notes),
    )


def _similar_workloads(
    session: Session,
    cluster: Cluster,
    workload: Workload,
    shape: model.ModelShape,
    data: ClusterRuns,
    baseline: float,
    baseline_sd: float,
) -> tuple[list[model.SimilarWorkload], list[UsedRun]]:
    """Other workloads on the same cluster whose shape is similar, with their runs."""
    ids = [i for i in data.by_workload if i != workload.id]
    if not ids:
        return [], []
    others = session.scalars(select(Workload).where(Workload.id.in_(ids)).order_by(Workload.name))
    out: list[model.SimilarWorkload] = []
    used: list[UsedRun] = []
    for other in others:
        mine = data.by_workload[other.id]
        try:
            other_shape, _ = workload_shape(other, cluster, mine[-1].provenance)
        except ValidationProblem:
            continue  # a workload without a shape cannot inform per-layer coefficients
        if not model.similar_shapes(shape, other_shape):
            continue
        all_obs, all_used, _ = data.observe(other, other_shape.n_layers)
        obs = [o for o in all_obs if o.peak_memory_gib is not None]
        used += [u for u in all_used if u.peak_memory_gib is not None]
        if obs:
            prior = model.memory_prior(other_shape, baseline_gib=baseline, baseline_sd_gib=baseline_sd)
            out.append(model.SimilarWorkload(other.name, prior, tuple(obs)))
    return out, used


@dataclass(frozen=True)
class ReleaseAdvice:
    """The advice for every (cluster, workload) a release ran, for its report and page."""

    release: str
    items: tuple[CheckpointingAdvice, ...]
    not_advised: tuple[str, ...]  # "cluster / workload: why"


def release_advice(session: Session, release_ref: str) -> ReleaseAdvice:
    """:func:`checkpointing_advice` for each (cluster, workload) with succeeded runs of the release,
    at the cluster's known device memory and the default utilisation; pairs it cannot advise on
    (no layer count, unknown device memory) are listed with the reason."""
    release = catalog.get_release(session, release_ref, "release")
    pairs = session.execute(
        select(Cluster.name, Workload.name)
        .join(Run, Run.cluster_id == Cluster.id)
        .join(Workload, Run.workload_id == Workload.id)
        .where(Run.release_id == release.id, Run.status == RunStatus.succeeded.value, NOT_EXCLUDED)
        .distinct()
        .order_by(Cluster.name, Workload.name)
    ).all()
    items, skipped = [], []
    loaded: dict[str, tuple[Cluster, ClusterRuns]] = {}
    for cluster_name, workload_name in pairs:
        if cluster_name not in loaded:
            cluster = catalog.get_named(session, Cluster, cluster_name, "cluster")
            loaded[cluster_name] = (cluster, ClusterRuns(session, cluster))
        cluster, data = loaded[cluster_name]
        workload = catalog.get_named(session, Workload, workload_name, "workload")
        try:
            items.append(_advise(session, release, cluster, workload, data, None, model.DEFAULT_UTILISATION))
        except ValidationProblem as exc:
            why = exc.errors[0].msg if exc.errors else exc.detail
            skipped.append(f"{cluster_name} / {workload_name}: {why}")
    return ReleaseAdvice(release.ref, tuple(items), tuple(skipped))
