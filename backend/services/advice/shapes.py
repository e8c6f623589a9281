"""The advisor's view of a workload: its shape (preset, runner options or its latest run's provenance)
and the memory of one device of the cluster."""

from __future__ import annotations

import math
from typing import Any

from ablate.backend.analysis import checkpointing as model
from ablate.backend.db.models import Cluster, Workload
from ablate.backend.domain.model_shapes import PRESETS, resolve_model
from ablate.backend.domain.runner import DEFAULT_RUNNER as TORCH_LLM
from ablate.backend.services.errors import ValidationProblem

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


def to_int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def to_bool(value: Any) -> bool:
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


def _preset_key(name: str | None) -> str | None:
    key = (name or "").split("/")[-1].lower()
    return key if key in PRESETS else None


def _dims(workload: Workload, opts: dict[str, Any], prov: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The model's dimensions: a torch-llm preset with its runner options, else the runner options,
    else what the latest run recorded."""
    preset = _preset_key(workload.model)
    if preset is not None:
        try:
            cfg = resolve_model(preset, opts)
        except (TypeError, ValueError) as exc:
            raise ValidationProblem.at("workload", f"workload {workload.name!r}: {exc}") from None
        dims: dict[str, Any] = {
            "n_layers": cfg.n_layers,
            "hidden": cfg.dim,
            "n_heads": cfg.n_heads,
            "n_kv_heads": cfg.kv_heads,
            "vocab_size": cfg.vocab_size,
            "ffn_hidden": cfg.hidden,
            "tie_embeddings": cfg.tie_embeddings,
            "gated_mlp": True,
        }
        return dims, f"torch-llm preset {preset}" + (" with runner_options" if opts else "")
    source = "runner_options"
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
    dims = {k: to_int(v) for k, v in named.items()}
    dims["gated_mlp"] = to_bool(opts.get("gated_mlp", prov.get("model_gated_mlp", "false")))
    dims["tie_embeddings"] = to_bool(opts.get("tie_embeddings", prov.get("model_tied", "false")))
    return dims, source


def workload_shape(
    workload: Workload, cluster: Cluster, provenance: dict[str, Any] | None = None
) -> tuple[model.ModelShape, str]:
    """The shape of ``workload`` on ``cluster`` and where it came from; raises ValidationProblem
    (422) naming what is missing, e.g. a workload without a layer count."""
    opts = dict(workload.runner_options or {})
    prov = provenance or {}
    runner = workload.runner or TORCH_LLM
    dims, source = _dims(workload, opts, prov)
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
    seq = workload.seq_len or to_int(prov.get("seq_len")) or (128 if runner == TORCH_LLM else None)
    if not seq:
        raise ValidationProblem.at("workload", f"workload {workload.name!r} has no seq_len")
    micro = workload.micro_batch or to_int(prov.get("micro_batch")) or 1
    precision = str(workload.precision or prov.get("precision_requested") or "bf16").lower()
    cpu_fp32 = runner == TORCH_LLM and cluster.accelerator == "cpu" and not to_bool(opts.get("cpu_autocast"))
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
