"""The run page: summary metrics, step-time and loss charts, environment, provenance, log tail, error,
and the run's log files per attempt (one per node, per rank where there are ranks), each attempt with
its outcome."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ablate.backend import charts
from ablate.backend.domain.metrics import get_metric
from ablate.backend.services import run_logs
from ablate.backend.services import runs as run_service

# Enough points for a 1280 px wide chart; min-max downsampling keeps spikes visible.
MAX_CHART_POINTS = 2_000
CHART_METRICS = ("step_time_s", "loss")


@dataclass
class MetricRow:
    name: str
    label: str
    value: float
    unit: str


@dataclass
class RunPage:
    run: dict[str, Any]
    metrics: list[MetricRow]
    chart_html: str | None
    chart_traces: int
    downsampled: list[str]
    logs: list[dict[str, Any]] = field(default_factory=list)  # every attempt's files
    attempts: list[run_logs.Attempt] = field(default_factory=list)


def _metric_rows(metrics: list[dict[str, Any]]) -> list[MetricRow]:
    rows = []
    for m in metrics:
        known = get_metric(m["name"])
        rows.append(MetricRow(m["name"], known.label if known else m["name"], m["value"], m["unit"]))
    return rows


def warmup_steps(provenance: dict[str, Any]) -> int | None:
    """The warm-up steps a runner recorded in provenance (``warmup_steps``, torch-llm's), if any."""
    value = str(provenance.get("warmup_steps", "")).strip()
    return int(value) if value.isdigit() else None


def run_page(session: Session, run_id: int, log_dir: Path | None = None) -> RunPage:
    detail = run_service.run_detail(session, run_id)
    present = {s["metric"] for s in detail["series"]}
    series: dict[str, tuple[list[float], list[float]]] = {}
    downsampled: list[str] = []
    for metric in CHART_METRICS:
        if metric not in present:
            continue
        data = run_service.run_series(session, run_id, metric, max_points=MAX_CHART_POINTS)
        series[metric] = (data["steps"], data["values"])
        if data["downsampled"]:
            downsampled.append(f"{metric}: {len(data['values'])} of {data['n_points']} points")
    chart_html = None
    if series:
        label = f"run #{run_id} · {detail['variant']} · {detail['workload']}"
        fig = charts.run_series(
            series,
            run_label=label,
            release=detail["release"],
            cluster=detail["cluster"],
            warmup_steps=warmup_steps(detail["provenance"]),
        )
        chart_html = charts.figure_to_div(fig, "chart-run-series")
    attempts = run_logs.attempts(session, run_id, log_dir) if log_dir is not None else []
    return RunPage(
        run=detail,
        metrics=_metric_rows(detail["metrics"]),
        chart_html=chart_html,
        chart_traces=len(series),
        downsampled=downsampled,
        logs=[f for a in attempts for f in a.files],
        attempts=attempts,
    )
