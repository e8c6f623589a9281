"""Plan-time checks of activation checkpointing: a variant asking torch-llm to checkpoint more layers
than the workload's model has would only fail at run time, after the study was queued."""

from __future__ import annotations

from ablate.backend.db.models import Variant, Workload
from ablate.backend.domain.factors import normalize_factor
from ablate.backend.domain.model_shapes import resolve_model
from ablate.backend.domain.runner import DEFAULT_RUNNER as TORCH_LLM
from ablate.backend.services.errors import ValidationProblem


def check_ckpt_layers(variants: list[Variant], workloads: list[Workload]) -> None:
    """Refuse (422) a torch-llm (variant, workload) whose ``ckpt_layers`` is outside 0..n_layers."""
    for w_index, workload in enumerate(workloads):
        if (workload.runner or TORCH_LLM) != TORCH_LLM:
            continue
        for v_index, variant in enumerate(variants):
            factors = {normalize_factor(f) for f in variant.factors or []}
            opts = {**(workload.runner_options or {}), **(variant.runner_options or {})}
            env_on = str((variant.env or {}).get("CHECKPOINT_OPTIMIZATION", "")).strip().lower()
            on = "ckpt_opt" in factors or env_on in {"1", "true", "yes", "on"}
            if not on or "ckpt_layers" not in opts:
                continue
            try:
                n_layers = resolve_model(str(workload.model or "tiny"), opts).n_layers
                k = int(opts["ckpt_layers"])
            except (TypeError, ValueError):
                continue  # the runner reports a bad model or option itself
            if not 0 <= k <= n_layers:
                raise ValidationProblem.at(
                    f"variants[{v_index}].runner_options.ckpt_layers",
                    f"variant {variant.name!r}: ckpt_layers {k} outside 0..{n_layers}, the layers of "
                    f"workload {workload.name!r} (workloads[{w_index}])",
                )
