"""Plotly figures built once in Python; the dashboard and the exported report embed the same ones."""

from backend.charts.ablation import ablation_bars, contribution_waterfall, speedup_heatmap
from backend.charts.colors import DEFAULT_LADDER_COLORS, variant_colors
from backend.charts.html import figure_to_div, plotly_js_source
from backend.charts.layout import empty_figure
from backend.charts.memory import memory_bars, throughput_vs_memory
from backend.charts.series import run_series
from backend.charts.trend import release_trend

__all__ = [
    "DEFAULT_LADDER_COLORS",
    "ablation_bars",
    "contribution_waterfall",
    "empty_figure",
    "figure_to_div",
    "memory_bars",
    "plotly_js_source",
    "release_trend",
    "run_series",
    "speedup_heatmap",
    "throughput_vs_memory",
    "variant_colors",
]
