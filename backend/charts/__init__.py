"""Plotly figures built once in Python; the dashboard and the exported report embed the same ones."""

from ablate.backend.charts.ablation import ablation_bars, contribution_waterfall, speedup_heatmap
from ablate.backend.charts.colors import DEFAULT_LADDER_COLORS, variant_colors
from ablate.backend.charts.html import DRAW_FIGURES_JS, Chart, embed, figure_to_div, plotly_js_source
from ablate.backend.charts.layout import empty_figure
from ablate.backend.charts.memory import memory_bars, throughput_vs_memory
from ablate.backend.charts.series import run_series
from ablate.backend.charts.trend import TrendSpec, history_chart, release_trend

__all__ = [
    "DEFAULT_LADDER_COLORS",
    "DRAW_FIGURES_JS",
    "Chart",
    "TrendSpec",
    "ablation_bars",
    "contribution_waterfall",
    "embed",
    "empty_figure",
    "figure_to_div",
    "history_chart",
    "memory_bars",
    "plotly_js_source",
    "release_trend",
    "run_series",
    "speedup_heatmap",
    "throughput_vs_memory",
    "variant_colors",
]
