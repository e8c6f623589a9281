"""One colour per variant, identical in every chart of the dashboard and the report.

The default ladder names have fixed colours. Any other name gets a colour from a stable hash of
the name (sha1, not Python's salted ``hash``), so a variant keeps its colour across charts,
processes and releases. Within one call, collisions are resolved by probing the palette in name
order; a report should call :func:`variant_colors` once with every variant it shows and pass the
mapping to each figure, so that even colliding names agree everywhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

DEFAULT_LADDER_COLORS: dict[str, str] = {
    "Base": "#7f7f7f",
    "Base+ACCL": "#1f77b4",
    "AC2+ACCL": "#ff7f0e",
    "AC2+ACCL+CompilerOpt": "#2ca02c",
    "AC2+ACCL+CompilerOpt+CkptOpt": "#d62728",
}

# Distinct colours not used by the ladder (from D3/Dark24), readable on a white background.
PALETTE: tuple[str, ...] = (
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
    "#2e91e5",
    "#e15f99",
    "#1ca71c",
    "#750d86",
    "#eb663b",
    "#511cfb",
    "#00a08b",
    "#fb00d1",
    "#b68100",
    "#6c4516",
    "#0d2a63",
    "#af0038",
    "#862a16",
    "#a777f1",
    "#620042",
)

TOTAL_COLOR = "#333333"


def _hash_index(name: str) -> int:
    return int.from_bytes(hashlib.sha1(name.encode("utf-8")).digest()[:4], "big") % len(PALETTE)


def variant_colors(names: Iterable[str]) -> dict[str, str]:
    """Deterministic colour for each name (insertion order of the result follows ``names``)."""
    ordered = list(dict.fromkeys(names))
    result: dict[str, str] = {n: DEFAULT_LADDER_COLORS[n] for n in ordered if n in DEFAULT_LADDER_COLORS}
    used: set[str] = set()
    for name in sorted(n for n in ordered if n not in result):
        idx = _hash_index(name)
        # Probe for a free slot; once the palette is exhausted, colours repeat by hash.
        for step in range(len(PALETTE)):
            candidate = PALETTE[(idx + step) % len(PALETTE)]
            if candidate not in used:
                break
        else:
            candidate = PALETTE[idx]
        used.add(candidate)
        result[name] = candidate
    return {n: result[n] for n in ordered}


def color_for(name: str, colors: dict[str, str] | None) -> str:
    """Colour from a precomputed mapping, falling back to the name's own stable colour."""
    if colors and name in colors:
        return colors[name]
    return variant_colors([name])[name]
