"""Plan sweeps: ``sweep: {ckpt_layers: [0, 2, 4, 8, 16]}`` turns every variant of a plan into one
variant per value, so that a study measures peak memory and step time against k, the evidence the
checkpointing advisor (docs/advisor.md) is calibrated with."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ablate.backend.domain.factors import normalize_factor
from ablate.backend.schemas.catalog import VariantDef
from ablate.backend.schemas.common import Strict

CKPT = "ckpt_opt"
CKPT_ENV = "CHECKPOINT_OPTIMIZATION"
MAX_POSITION = 10_000


class Sweep(Strict):
    """Values to sweep; each variant of the plan is run once per value."""

    ckpt_layers: Annotated[list[Annotated[int, Field(ge=0, le=10_000)]], Field(min_length=1, max_length=64)]


def _is_ckpt(factor: str) -> bool:
    return normalize_factor(factor) == CKPT


def expand_ckpt_layers(variants: list[VariantDef | str], values: list[int]) -> list[str | VariantDef]:
    """One variant per (variant, k), named ``"<name> ckpt_layers=<k>"``: for k > 0 with the ckpt_opt
    factor, ``CHECKPOINT_OPTIMIZATION=true`` and the runner option ``ckpt_layers: k``; for k = 0
    without either (no layer checkpointed is no checkpointing), the option still recorded.
    Raises ValueError for repeated values, variants given by name and positions out of range."""
    if len(set(values)) != len(values):
        raise ValueError(f"sweep.ckpt_layers lists a value twice: {values}")
    out: list[str | VariantDef] = []
    for i, variant in enumerate(variants):
        if isinstance(variant, str):
            raise ValueError(
                f"sweep: variants[{i}] ({variant!r}) is given by name; a swept variant must be defined "
                "in full (its factors, env and runner options are copied into each swept variant)"
            )
        base_factors = [f for f in variant.factors if not _is_ckpt(f)]
        base_env = {k: v for k, v in variant.env.items() if k != CKPT_ENV}
        lead = f"{variant.description} " if variant.description else ""
        for j, k in enumerate(sorted(values)):
            position = variant.position * 100 + j
            if position > MAX_POSITION:
                raise ValueError(
                    f"sweep: variants[{i}] position {variant.position} is too large to sweep (<= 100)"
                )
            out.append(
                VariantDef(
                    name=f"{variant.name} ckpt_layers={k}",
                    position=position,
                    factors=[*base_factors, CKPT] if k else base_factors,
                    env={**base_env, CKPT_ENV: "true"} if k else base_env,
                    image=variant.image,
                    runner_options={**variant.runner_options, "ckpt_layers": k},
                    description=f"{lead}Swept from {variant.name}: ckpt_layers={k}.",
                )
            )
    if len(out) > 64:
        raise ValueError(
            f"sweep: {len(variants)} variants x {len(values)} values = {len(out)} variants, at most 64"
        )
    return out
