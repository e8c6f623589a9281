"""CSV report: one table with a ``section`` column, so one file holds runs and summaries.

Sections: ``run`` (one row per run and metric, every run of the release and its baseline, failed
ones too with an empty value), ``summary`` (one row per cluster, workload, variant and analysed
metric: median, interval, speed-up over Base), ``factorial_effect`` (only for a full-factorial
release: one row per cluster, workload, metric and main effect or two-way interaction, the factor
name(s) in ``variant`` joined by " x ", ``effect`` main or interaction, the effect as ``speedup``
with its interval, p-value and ``n`` runs) and ``release_delta`` (change of geometric means
against the baseline release with its verdict: improved, regressed, unchanged or not testable).
``p_value`` is the raw p, ``q_value`` the Benjamini-Hochberg adjusted one the verdict reads, and
``method`` names the test. Summary rows name the step's reference rung (``step_reference``,
``step_skipped`` for rungs it spans) and the share's interval. Columns that do not apply to a
section are empty.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

from ablate.backend.analysis.ablation import speedup_of
from ablate.backend.services.comparison import ReleaseComparison

COLUMNS: tuple[str, ...] = (
    "section",
    "release",
    "cluster",
    "workload",
    "variant",
    "effect",
    "metric",
    "unit",
    "run_id",
    "repeat",
    "status",
    "value",
    "n",
    "median",
    "ci_low",
    "ci_high",
    "cv",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "p_value",
    "q_value",
    "method",
    "step",
    "step_reference",
    "step_skipped",
    "share",
    "share_ci_low",
    "share_ci_high",
    "baseline_release",
    "baseline_median",
    "change_pct",
    "change_ci_low",
    "change_ci_high",
    "verdict",
    "lookback_improvement_pct",
    "lookback_t",
    "lookback_verdict",
    "notes",
)


# A spreadsheet runs a cell that starts with one of these as a formula (OWASP "CSV injection").
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(x: object) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return repr(x)  # shortest round-tripping text: no precision lost, always the same
    if isinstance(x, int):
        return str(x)
    text = str(x)
    # Names and notes are user text: a leading quote makes a spreadsheet show it instead of running it.
    return f"'{text}" if text.startswith(_FORMULA_STARTS) else text


def rows(c: ReleaseComparison) -> Iterable[dict[str, object]]:
    """Every row of the report, section by section (run, summary, factorial_effect, release_delta)."""
    yield from _run_rows(c)
    yield from _summary_rows(c)
    yield from _factorial_rows(c)
    yield from _delta_rows(c)


def _run_rows(c: ReleaseComparison) -> Iterable[dict[str, object]]:
    # A row per metric of a run, or one without a metric for a run that has none (columns come from COLUMNS).
    for r in c.runs:
        run: dict[str, object] = {
            "section": "run",
            "release": r.release,
            "cluster": r.cluster,
            "workload": r.workload,
            "variant": r.variant,
            "run_id": r.run_id,
            "repeat": r.repeat,
            "status": r.status,
        }
        if not r.metrics:
            yield run
        for name, (value, unit) in r.metrics.items():
            yield {**run, "metric": name, "unit": unit, "value": value}


def _summary_rows(c: ReleaseComparison) -> Iterable[dict[str, object]]:
    for entry in c.ladders:
        lad = entry.analysis
        for v in lad.variants:
            s = v.summary
            vs = v.vs_baseline
            speedup, speedup_low, speedup_high = speedup_of(lad, v)
            yield {
                "section": "summary",
                "release": c.release.ref,
                "cluster": entry.cluster,
                "workload": entry.workload,
                "variant": v.variant,
                "metric": entry.metric,
                "unit": lad.unit,
                "n": s.n,
                "median": s.median,
                "ci_low": s.ci_low,
                "ci_high": s.ci_high,
                "cv": s.cv,
                "speedup": speedup,
                "speedup_ci_low": speedup_low,
                "speedup_ci_high": speedup_high,
                "p_value": vs.p_value if vs else None,
                "q_value": vs.q_value if vs else None,
                "method": vs.test if vs else None,
                "step": v.step.ratio if v.step else None,
                "step_reference": v.previous_variant,
                "step_skipped": " | ".join(v.skipped) or None,
                "share": v.share,
                "share_ci_low": v.share_ci_low,
                "share_ci_high": v.share_ci_high,
                "notes": "; ".join(dict.fromkeys((*s.reasons, *v.reasons))),
            }


def _factorial_rows(c: ReleaseComparison) -> Iterable[dict[str, object]]:
    for f in c.factorials:
        fa = f.analysis
        for kind, effects in (("main", fa.main_effects), ("interaction", fa.interactions)):
            for e in effects:
                yield {
                    "section": "factorial_effect",
                    "release": c.release.ref,
                    "cluster": f.cluster,
                    "workload": f.workload,
                    "variant": " x ".join(e.factors),
                    "effect": kind,
                    "metric": f.metric,
                    "unit": fa.unit,
                    "n": fa.n_values,
                    "speedup": e.factor,
                    "speedup_ci_low": e.ci_low,
                    "speedup_ci_high": e.ci_high,
                    "p_value": e.p_value,
                    "method": e.method or None,
                    "notes": "; ".join(fa.reasons),
                }


def _delta_rows(c: ReleaseComparison) -> Iterable[dict[str, object]]:
    for d in c.deltas:
        result = d.result
        yield {
            "section": "release_delta",
            "release": c.release.ref,
            "cluster": d.cluster,
            "workload": d.workload,
            "variant": d.variant,
            "metric": d.metric,
            "unit": d.unit,
            "n": result.n_contender if result else None,
            "median": result.contender_median if result else None,
            "p_value": result.p_value if result else None,
            "q_value": result.q_value if result else None,
            "method": result.test if result else None,
            "baseline_release": c.baseline.ref if c.baseline else None,
            "baseline_median": result.baseline_median if result else None,
            "change_pct": result.change_pct if result else None,
            "change_ci_low": result.change_ci_low if result else None,
            "change_ci_high": result.change_ci_high if result else None,
            "verdict": d.verdict or d.status,
            "lookback_improvement_pct": d.lookback.improvement_pct if d.lookback else None,
            "lookback_t": d.lookback.oriented_t if d.lookback else None,
            "lookback_verdict": d.lookback.verdict if d.lookback else None,
            "notes": "; ".join(result.reasons) if result else "",
        }


def render_csv(c: ReleaseComparison) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows(c):
        writer.writerow([_cell(row.get(col)) for col in COLUMNS])
    return buf.getvalue()
