"""Factors: the optimisations a variant switches on, named once however a plan spells them."""

from __future__ import annotations

from collections.abc import Iterable

# Factor names of the default CNP ladder. Studies may spell them "CompilerOpt", "ckpt-opt", ...
KNOWN_FACTORS: frozenset[str] = frozenset({"accl", "ac2", "compiler_opt", "ckpt_opt"})
_ALIASES: dict[str, str] = {
    "compileropt": "compiler_opt",
    "compile": "compiler_opt",
    "torch_compile": "compiler_opt",
    "ckptopt": "ckpt_opt",
    "checkpoint_opt": "ckpt_opt",
    "activation_checkpointing": "ckpt_opt",
}


def normalize_factor(name: str) -> str:
    """Canonical spelling of a factor name: lower case, ``-``/space -> ``_``, known aliases folded."""
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    return _ALIASES.get(key, key)


def normalize_factors(factors: Iterable[str]) -> list[str]:
    """A variant's factor set in canonical form: normalised, without duplicates, sorted."""
    return sorted({normalize_factor(f) for f in factors})


def factor_error(runner: str, factor: str, accelerator: str, why: str) -> str:
    """The message for a factor a runner cannot implement on a cluster (the same wording everywhere)."""
    return f"runner {runner} cannot implement factor {factor!r} on a {accelerator} cluster: {why}"
