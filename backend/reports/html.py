"""HTML report: one self-contained file (plotly.js inlined from the installed package) that opens offline.

Charts are the same figures the dashboard shows (``ablate.backend.charts``), embedded with fixed div ids so
the same data gives the same bytes. Tables come from :mod:`ablate.backend.reports.tables`, shared with the
Markdown report.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from ablate.backend import charts
from ablate.backend.charts import Chart
from ablate.backend.charts.plan import cluster_chart_plan
from ablate.backend.domain.csp import content_security_policy, script_hash
from ablate.backend.reports import tables as t
from ablate.backend.reports.checkpointing import advisor_section
from ablate.backend.reports.markdown import adaptive_lines
from ablate.backend.services.advice import ReleaseAdvice
from ablate.backend.services.comparison import ReleaseComparison
from ablate.backend.services.history import ReleaseHistories

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class ClusterCharts:
    cluster: str
    charts: tuple[Chart, ...]


@lru_cache(maxsize=1)
def _environment() -> Environment:
    return Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(["html", "j2"]),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def cluster_charts(c: ReleaseComparison) -> list[ClusterCharts]:
    """Every chart of the report (every kind of :func:`cluster_chart_plan`), per cluster, with ids that
    depend only on positions in the data.

    Built afresh on every call, not memoised: a figure is one validated plotly construction
    (a few ms), so the whole report's charts cost well under the 2 s aim (benchmarks/README.md).
    """
    out = []
    colors = charts.variant_colors(v.name for v in c.variants)
    for ci, cluster in enumerate(c.clusters):
        items = []
        for planned in cluster_chart_plan(c, cluster.name, colors):
            where = f"c{ci}-w{planned.workload_index}" if planned.workload is not None else f"c{ci}"
            items.append(charts.embed(planned.draw(), f"{where}-{planned.kind}", planned.kind))
        out.append(ClusterCharts(cluster.name, tuple(items)))
    return out


def history_charts(h: ReleaseHistories | None) -> list[Chart]:
    """One history chart per cell the report shows (see :func:`release_histories` for the bound)."""
    if h is None:
        return []
    return [
        charts.embed(
            charts.history_chart(
                item.history,
                variant=item.key.variant,
                metric=item.key.metric,
                unit=item.unit,
                cluster=item.key.cluster,
                workload=item.key.workload,
            ),
            f"h{i}-history",
            "history",
        )
        for i, item in enumerate(h.items)
    ]


@lru_cache(maxsize=1)
def report_script_hashes() -> tuple[str, ...]:
    """The hashes of the report's two inline scripts: plotly.js and the figure drawer.

    Constant for an installed plotly, so the report's own ``<meta>`` policy and the header the
    API sends with it allow exactly these scripts and no other (no ``'unsafe-inline'``).
    """
    return (script_hash(charts.plotly_js_source()), script_hash(charts.DRAW_FIGURES_JS))


def render_html(
    c: ReleaseComparison,
    *,
    generated_at: datetime | None = None,
    advice: ReleaseAdvice | None = None,
    history: ReleaseHistories | None = None,
) -> str:
    template = _environment().get_template("report.html.j2")
    return template.render(
        advisor=advisor_section(advice),
        c=c,
        overview=t.overview(c),
        regressions=t.regression_table(c),
        adaptive_lines=adaptive_lines(c.adaptive),
        not_testable=t.not_testable_table(c) if c.not_testable else None,
        ablation=t.ablation_tables(c),
        factorial=t.factorial_tables(c),
        deltas=t.delta_tables(c),
        manifest=t.manifest_table(c),
        environment=t.environment_table(c),
        method=t.method_table(c),
        cluster_charts=cluster_charts(c),
        history=history,
        history_charts=history_charts(history),
        plotly_js=Markup(charts.plotly_js_source()),  # the installed plotly bundle, trusted
        draw_figures_js=Markup(charts.DRAW_FIGURES_JS),  # our own constant script, trusted
        content_security_policy=content_security_policy(report_script_hashes(), meta=True),
        generated_at=generated_at.isoformat() if generated_at else None,
    )
