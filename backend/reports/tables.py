"""The report's tables as plain rows of text, shared by the Markdown and HTML renderers.

Building them once keeps both formats saying exactly the same numbers. Every list is in the order
of the comparison (clusters, workloads by name; variants in ladder order), never in dict or set
order, so a report of the same data is byte-identical.
"""

# The multiplication sign and en dash are the intended typography of a report.
# ruff: noqa: RUF001

from __future__ import annotations

from dataclasses import dataclass

from ablate.backend.analysis.ablation import LadderAnalysis, VariantResult
from ablate.backend.domain.formatting import MEDIAN_DIGITS, interval, num, pct, pvalue, ratio
from ablate.backend.domain.formatting import MISSING as NA
from ablate.backend.domain.metrics import describe_metric
from ablate.backend.services.comparison import ReleaseComparison, ReleaseDelta, RunSetComparison


@dataclass(frozen=True)
class Table:
    key: str  # stable anchor, e.g. "ablation-h200-2x8-throughput_tokens_per_s"
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""


def anchor(*parts: str) -> str:
    """A stable HTML id / Markdown-safe key from names (letters, digits, ``-``, ``_`` only)."""
    text = "-".join(parts)
    out = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in text)
    return out if out[:1].isalpha() else f"t-{out}"


def _speedup(ladder: LadderAnalysis, v: VariantResult) -> tuple[str, str, str]:
    if v.variant == ladder.baseline and v.summary.n:
        return ratio(1.0), NA, NA
    c = v.vs_baseline
    if c is None:
        return NA, NA, NA
    return ratio(c.ratio), interval(c.ci_low, c.ci_high, "ratio"), pvalue(c.p_value)


def _notes(*groups: tuple[str, ...]) -> str:
    seen = dict.fromkeys(r for g in groups for r in g)
    return "; ".join(seen)


def overview(c: ReleaseComparison) -> Table:
    counts = {"succeeded": 0, "not succeeded": 0}
    for cell in c.cells:
        counts["succeeded"] += cell.succeeded
        counts["not succeeded"] += len(cell.not_succeeded)
    rows = [
        ("Release", c.release.ref),
        ("Platform", c.release.platform),
        ("Release date", c.release.release_date or NA),
        ("Baseline release", f"{c.baseline.ref} ({c.baseline_source})" if c.baseline else "none"),
        ("Lookback releases", ", ".join(c.lookback_releases) or "none"),
        ("Clusters", ", ".join(cl.name for cl in c.clusters) or "none"),
        ("Workloads", str(len(c.workloads))),
        ("Variants", " → ".join(v.name for v in c.variants) or "none"),
        ("Runs succeeded / not succeeded", f"{counts['succeeded']} / {counts['not succeeded']}"),
        ("Metrics analysed", ", ".join(c.metrics) or "none"),
    ]
    for m in c.metrics:
        vc = c.verdict_counts(m)
        rows.append(
            (
                f"Verdicts ({m})",
                f"{vc['regressed']} regressed, {vc['improved']} improved, {vc['unchanged']} unchanged, "
                f"{vc['not compared']} not compared",
            )
        )
    return Table("overview", "Overview", ("Item", "Value"), tuple(rows))


def ablation_tables(c: ReleaseComparison) -> list[Table]:
    tables = []
    for cluster in c.clusters:
        for metric in c.metrics:
            ladders = c.ladder_map(cluster.name, metric)
            mdef = describe_metric(metric, next(iter(ladders.values())).unit if ladders else None)
            rows = []
            for workload, ladder in ladders.items():
                for v in ladder.variants:
                    s = v.summary
                    sp, sp_ci, p = _speedup(ladder, v)
                    rows.append(
                        (
                            workload,
                            v.variant,
                            str(s.n),
                            num(s.median, MEDIAN_DIGITS),
                            interval(s.ci_low, s.ci_high, digits=MEDIAN_DIGITS),
                            pct(s.cv * 100 if s.cv is not None else None, signed=False),
                            sp,
                            sp_ci,
                            p,
                            ratio(v.step.ratio) if v.step else NA,
                            NA if v.share is None else pct(v.share * 100, signed=False),
                            _notes(
                                s.reasons if s.n else (),
                                v.reasons,
                                v.vs_baseline.reasons if v.vs_baseline else (),
                            ),
                        )
                    )
            tables.append(
                Table(
                    anchor("ablation", cluster.name, metric),
                    f"Ablation: {mdef.label} on {cluster.name}",
                    (
                        "Workload",
                        "Variant",
                        "n",
                        f"Median ({mdef.unit})",
                        f"{c.method.confidence:.0%} CI",
                        "CV %",
                        f"vs {c.baseline_variant or 'Base'}",
                        "CI",
                        "p",
                        "Step",
                        "Share of gain",
                        "Notes",
                    ),
                    tuple(rows),
                    note=f"{'higher' if mdef.direction == 'higher' else 'lower'} is better; "
                    "ratios > 1 are always better (oriented)" + _factorial_hint(c),
                )
            )
    return tables


def _factorial_hint(c: ReleaseComparison) -> str:
    if c.factorial_design is None:
        return ""
    return (
        f". These variants form a {c.factorial_design.label}: a step over the previous rung mixes a"
        " factor with its position in this order, so read the Factorial effects section for what"
        " each factor is worth on its own"
    )


def _effect_name(factors: tuple[str, ...]) -> str:
    return factors[0] if len(factors) == 1 else " × ".join(factors)


def factorial_tables(c: ReleaseComparison) -> list[Table]:
    """Main effects and two-way interactions per cluster and metric; none when not factorial."""
    design = c.factorial_design
    if design is None:
        return []
    tables = []
    conf = f"{c.method.confidence:.0%} CI"
    for cluster in c.clusters:
        for metric in c.metrics:
            analyses = c.factorial_map(cluster.name, metric)
            if not analyses:
                continue
            mdef = describe_metric(metric, next(iter(analyses.values())).unit)
            rows = []
            for workload, fa in analyses.items():
                effects = [("main effect", e) for e in fa.main_effects]
                effects += [("interaction", e) for e in fa.interactions]
                if not effects:
                    rows.append((workload, NA, NA, NA, NA, NA, NA, str(fa.n_values), _notes(fa.reasons)))
                for kind, e in effects:
                    p = e.p_value
                    sig = NA if p is None else ("yes" if p < c.method.alpha else "no")
                    rows.append(
                        (
                            workload,
                            _effect_name(e.factors),
                            kind,
                            ratio(e.factor),
                            interval(e.ci_low, e.ci_high, "ratio"),
                            pvalue(p),
                            sig,
                            str(fa.n_values),
                            _notes(fa.reasons),
                        )
                    )
            background = f" with {', '.join(design.background)} always on" if design.background else ""
            tables.append(
                Table(
                    anchor("factorial", cluster.name, metric),
                    f"Factorial effects: {mdef.label} on {cluster.name}",
                    (
                        "Workload",
                        "Factor",
                        "Effect",
                        "Effect ×",
                        conf,
                        "p",
                        f"p < {c.method.alpha:g}",
                        "n",
                        "Notes",
                    ),
                    tuple(rows),
                    note=(
                        f"{design.label}{background}; "
                        "main effect: ratio of geometric means with the factor on vs off, averaged over "
                        "the other factors; interaction (Yates): > 1 when the pair does better together "
                        "than their separate effects multiply to; oriented, > 1 is better; t interval and "
                        "t-test on the log scale, pooled within-cell variance; n: runs in the design"
                    ),
                )
            )
    return tables


def _delta_row(d: ReleaseDelta, with_lookback: bool = True) -> tuple[str, ...]:
    r = d.result
    row = [
        d.cluster,
        d.workload,
        d.variant,
        num(r.baseline_median, MEDIAN_DIGITS) if r else NA,
        num(r.contender_median, MEDIAN_DIGITS) if r else NA,
        pct(r.change_pct) if r else NA,
        interval(r.change_ci_low, r.change_ci_high, "pct") if r else NA,
        pvalue(r.p_value) if r else NA,
        d.verdict or d.status,
    ]
    if with_lookback:
        z = d.lookback.oriented_z if d.lookback else None
        row.append(NA if z is None else f"{z:+.2f} (n={d.lookback.n_history})")
    row.append(_notes(r.reasons if r else (), d.lookback.reasons if d.lookback else ()))
    return tuple(row)


def _delta_header(unit: str, with_lookback: bool = True) -> tuple[str, ...]:
    head = [
        "Cluster",
        "Workload",
        "Variant",
        f"Baseline median ({unit})" if unit else "Baseline median",
        f"Median ({unit})" if unit else "Median",
        "Change",
        "CI",
        "p",
        "Verdict",
    ]
    if with_lookback:
        head.append("Lookback z (>0 better)")
    head.append("Notes")
    return tuple(head)


def delta_tables(c: ReleaseComparison | RunSetComparison) -> list[Table]:
    tables = []
    lb = isinstance(c, ReleaseComparison)
    for metric in c.metrics:
        deltas = [d for d in c.deltas if d.metric == metric]
        unit = deltas[0].unit if deltas else describe_metric(metric).unit
        label = describe_metric(metric, unit).label
        rows = tuple(_delta_row(d, lb) for d in deltas)
        what = f"against {c.baseline.ref}" if lb and c.baseline else "against the baseline"
        tables.append(
            Table(
                anchor("release", metric),
                f"{label}: {what}",
                _delta_header(unit, lb),
                rows,
                note=f"verdict needs |change| ≥ {c.method.threshold_pct:g}% and p < {c.method.alpha:g}",
            )
        )
    return tables


def regression_table(c: ReleaseComparison) -> Table:
    rows = tuple(
        (d.metric, *_delta_row(d, True)[:9], ", ".join(c.suspects) or NA)
        for d in c.deltas
        if d.verdict == "regressed"
    )
    head = ("Metric", *_delta_header("", True)[:9], "Suspects (manifest changes)")
    return Table("regressions", "Regressions and suspects", head, rows)


def manifest_table(c: ReleaseComparison | RunSetComparison) -> Table:
    diff = c.manifest_diff
    rows: list[tuple[str, ...]] = []
    if diff is not None:
        for kind, items in (
            ("added", diff.added),
            ("removed", diff.removed),
            ("upgraded", diff.upgraded),
            ("downgraded", diff.downgraded),
        ):
            rows += [(ch.name, ch.old or NA, ch.new or NA, kind) for ch in items]
    rows.sort(key=lambda r: (r[0].lower(), r[0]))
    base = c.baseline.ref if isinstance(c, ReleaseComparison) and c.baseline else "baseline"
    return Table(
        "manifest",
        f"Manifest diff against {base}",
        ("Component", base, "This release", "Change"),
        tuple(rows),
    )


def environment_table(c: ReleaseComparison) -> Table:
    def kv(d: dict) -> str:
        return ", ".join(f"{k}={' | '.join(v) if isinstance(v, tuple) else v}" for k, v in d.items()) or NA

    rows = tuple(
        (
            v.name,
            ", ".join(v.factors) or NA,
            v.image or NA,
            kv(v.env),
            str(v.n_succeeded),
            kv(v.environment),
            kv(v.provenance),
        )
        for v in c.variants
    )
    return Table(
        "environment",
        "Environment and provenance per variant",
        ("Variant", "Factors", "Image", "Variant env", "Succeeded runs", "Run environment", "Provenance"),
        rows,
        note="run values are the distinct values over the variant's succeeded runs, joined by |",
    )


def method_table(c: ReleaseComparison | RunSetComparison) -> Table:
    m = c.method
    rows = (
        ("Runs used", m.runs_used),
        ("Interval", f"{m.confidence:.0%} {m.interval}, {m.n_resamples} resamples, seed {m.seed}"),
        ("Significance test", f"{m.test}, alpha {m.alpha:g}"),
        ("Verdict threshold", f"|change of medians| ≥ {m.threshold_pct:g}% and p < {m.alpha:g}"),
        (
            "Lookback",
            f"z-score of the new median against the last {m.lookback} releases, |z| > {m.z_threshold:g}",
        ),
        ("Noisy", f"n < {m.min_n} or coefficient of variation > {m.noisy_cv:.0%}"),
        ("Schema version", c.schema_version),
    )
    return Table("method", "Method", ("Item", "Value"), rows)
