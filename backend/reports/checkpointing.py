"""The checkpointing advisor's section of the release report: a summary table (one row per cluster
and workload), a per-k table for each, and the two figures of :mod:`ablate.backend.charts.checkpointing`.
Shared by the HTML and Markdown reports; the same advice gives the same bytes."""

from __future__ import annotations

from dataclasses import dataclass

from ablate.backend import charts
from ablate.backend.charts import Chart
from ablate.backend.charts.checkpointing import advisor_charts
from ablate.backend.domain.formatting import MEDIAN_DIGITS, interval, num, num_ci, ratio_ci
from ablate.backend.reports.tables import NA, Table, anchor
from ablate.backend.services.advice import CheckpointingAdvice, ReleaseAdvice

TITLE = "Activation checkpointing advice"


@dataclass(frozen=True)
class AdvisorSection:
    summary: Table
    tables: tuple[Table, ...]
    charts: tuple[Chart, ...]
    not_advised: tuple[str, ...]


def _ratio(value: float, low: float, high: float) -> str:
    return ratio_ci(value, low, high)


def _k(item: CheckpointingAdvice) -> str:
    a = item.advice
    return f"{a.recommended_ckpt_layers} of {a.n_layers}" if a.fits else f"none fits (of {a.n_layers})"


def summary_table(advice: ReleaseAdvice) -> Table:
    rows = []
    for item in advice.items:
        a, ch = item.advice, item.advice.chosen
        rows.append(
            (
                item.cluster,
                item.workload,
                _k(item),
                num_ci(ch.peak_memory_gib, ch.low_gib, ch.high_gib),
                f"{num(a.memory_budget_gib, MEDIAN_DIGITS)} "
                f"({num(a.device_memory_gib, MEDIAN_DIGITS)} x {a.utilisation:g})",
                _ratio(ch.throughput_ratio, ch.throughput_ratio_low, ch.throughput_ratio_high),
                a.basis,
                ", ".join(map(str, a.memory_run_ids)) or NA,
            )
        )
    note = (
        "The smallest number of checkpointed layers whose predicted peak, at the upper end of its 95% "
        "prediction interval, fits the budget; throughput relative to no checkpointing. Model and "
        "error: docs/advisor.md."
    )
    if advice.not_advised:
        note += " Not advised: " + "; ".join(advice.not_advised) + "."
    header = ("Cluster", "Workload", "Checkpoint", "Peak GiB [95% PI]", "Budget GiB", "Throughput vs k=0",
              "Basis", "Runs used")  # fmt: skip
    return Table(anchor("advisor", "summary"), TITLE, header, tuple(rows), note)


def k_table(item: CheckpointingAdvice) -> Table:
    chosen = item.advice.recommended_ckpt_layers
    rows = tuple(
        (
            f"{row.ckpt_layers}{' (recommended)' if row.ckpt_layers == chosen else ''}",
            num(row.peak_memory_gib, MEDIAN_DIGITS),
            interval(row.low_gib, row.high_gib, "num", MEDIAN_DIGITS),
            "yes" if row.fits else "no",
            _ratio(row.throughput_ratio, row.throughput_ratio_low, row.throughput_ratio_high),
            ", ".join(f"{v:.3f}" for v in row.measured_peak_gib) or NA,
        )
        for row in item.advice.table
    )
    header = ("k", "Peak GiB", "95% PI", "Fits", "Throughput vs k=0", "Measured GiB")
    return Table(
        anchor("advisor", item.cluster, item.workload),
        f"{item.workload} on {item.cluster}: peak memory and throughput by k",
        header,
        rows,
        item.advice.message,
    )


def advisor_section(advice: ReleaseAdvice | None, *, with_charts: bool = True) -> AdvisorSection | None:
    """The section, or None when nothing was advised (no run with a known shape)."""
    if advice is None or not (advice.items or advice.not_advised):
        return None
    figures = []
    if with_charts:
        for i, item in enumerate(advice.items):
            for kind, fig in advisor_charts(item):
                figures.append(charts.embed(fig, f"advisor-{i}-{kind}", f"advisor-{kind}"))
    return AdvisorSection(
        summary=summary_table(advice),
        tables=tuple(k_table(item) for item in advice.items),
        charts=tuple(figures),
        not_advised=advice.not_advised,
    )


def advisor_tables(advice: ReleaseAdvice | None) -> list[Table]:
    """The section's tables (summary first) for the Markdown report; empty when nothing was advised."""
    section = advisor_section(advice, with_charts=False)
    return [section.summary, *section.tables] if section else []
