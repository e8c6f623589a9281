"""The report's tables as plain rows of text, shared by the Markdown and HTML renderers.

Building them once keeps both formats saying exactly the same numbers. Every list is in the order
of the comparison (clusters, workloads by name; variants in ladder order), never in dict or set
order, so a report of the same data is byte-identical.
"""

# The multiplication sign and en dash are the intended typography of a report.
# ruff: noqa: RUF001

from __future__ import annotations

from dataclasses import dataclass

from ablate.backend.analysis.ablation import LadderAnalysis, VariantResult, speedup_of
from ablate.backend.domain.formatting import MEDIAN_DIGITS, interval, num, pct, pvalue, qvalue, ratio
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
    sp, lo, hi = speedup_of(ladder, v)
    c = v.vs_baseline
    pq = NA if c is None or v.variant == ladder.baseline else _p_and_q(c.p_value, c.q_value)
    return ratio(sp), interval(lo, hi, "ratio"), pq


def _p_and_q(p: float | None, q: float | None) -> str:
    """Raw p and the Benjamini-Hochberg q the verdict reads, e.g. "0.012 / 0.048"."""
    return NA if p is None else f"{pvalue(p)} / {qvalue(q)}"


def _step(v: VariantResult) -> str:
    """The step's ratio and the rung it is measured against, naming any rung it spans."""
    if v.step is None:
        return NA
    text = f"{ratio(v.step.ratio)} vs {v.previous_variant}"
    if v.skipped:
        text += f" (across missing {', '.join(v.skipped)})"
    return text


def _share(v: VariantResult) -> str:
    if v.share is None:
        return NA
    text = pct(v.share * 100, signed=False)
    if v.share_ci_low is not None and v.share_ci_high is not None:
        text += f" [{v.share_ci_low * 100:.0f}%, {v.share_ci_high * 100:.0f}%]"
    return text


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
                f"{vc['regressed']} regressed, {vc['suspect']} suspect, {vc['improved']} improved, "
                f"{vc['unchanged']} unchanged, {vc['not testable']} not testable, "
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
                            _step(v),
                            _share(v),
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
                        "p / q",
                        "Step (vs reference rung)",
                        "Share of gain [≥95% interval]",
                        "Notes",
                    ),
                    tuple(rows),
                    note=f"{'higher' if mdef.direction == 'higher' else 'lower'} is better; "
                    "ratios > 1 are always better (oriented); ratios of geometric means with Welch t "
                    "intervals; q: Benjamini-Hochberg across the release; shares only when the total "
                    "gain's interval excludes no gain" + _factorial_hint(c),
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
                        "the other factors; interaction at full size: how much more (> 1) or less the "
                        "first factor gains with the second on than off; oriented, > 1 is better; t "
                        "interval and t-test on the log scale, Welch-Satterthwaite standard error per "
                        "contrast; n: runs in the design"
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
        _p_and_q(r.p_value, r.q_value) if r else NA,
        verdict_text(d),
    ]
    if with_lookback:
        row.append(lookback_text(d))
    row.append(_notes(r.reasons if r else (), d.lookback.reasons if d.lookback else ()))
    return tuple(row)


def verdict_text(d: ReleaseDelta) -> str:
    """The verdict, with the sizes when no test could be made ("not testable (n=1 vs 3)")."""
    r = d.result
    if r is None:
        return d.status
    if r.verdict == "not testable":
        return f"not testable (n={r.n_baseline} vs {r.n_contender})"
    text: str = r.verdict
    if d.suspect:
        text = "suspect regression" if r.indicated == "regressed" else "suspect improvement"
    if d.busy_runs:
        # The mark every verdict row carries when some of its runs were measured on a busy host.
        left = "kept" if d.busy_included else "left out"
        text += f" [busy host: {d.busy_runs} run{'s' if d.busy_runs != 1 else ''} {left}]"
    return text


def lookback_text(d: ReleaseDelta) -> str:
    """E.g. "-4.10% vs mean of 5, t=-3.2 (regressed)"; the reason when it does not speak."""
    lb = d.lookback
    if lb is None:
        return NA
    if lb.verdict is None:
        return f"no verdict ({lb.n_history} releases)"
    t = NA if lb.oriented_t is None else f"{lb.oriented_t:+.2f}"
    text = f"{pct(lb.improvement_pct)} vs mean of {lb.n_history}, t={t} ({lb.verdict})"
    tr = d.trend
    if tr is not None and tr.verdict in ("improved", "regressed") and tr.slope_pct is not None:
        text += f"; drift {tr.slope_pct:+.2f}% per release over {tr.n_releases} ({tr.verdict})"
    text += k_back_text(d, "; ")
    return text


def k_back_text(d: ReleaseDelta, sep: str = "") -> str:
    """E.g. "vs 25.06 (5 back) -6.10% (regressed)": only when the test against the release K back
    gives a verdict other than unchanged."""
    kb = d.k_back
    if kb is None or kb.verdict not in ("improved", "regressed") or d.k_back_release is None:
        return ""
    back = f"{d.lookback.n_history} back" if d.lookback is not None else "K back"
    return f"{sep}vs {d.k_back_release} ({back}) {pct(kb.improvement_pct)} ({kb.verdict})"


def _delta_header(unit: str, with_lookback: bool = True) -> tuple[str, ...]:
    head = [
        "Cluster",
        "Workload",
        "Variant",
        f"Baseline median ({unit})" if unit else "Baseline median",
        f"Median ({unit})" if unit else "Median",
        "Change",
        "CI",
        "p / q",
        "Verdict",
    ]
    if with_lookback:
        head.append("Lookback (> 0 better)")
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
        what = (
            f"against {c.baseline.ref}"
            if isinstance(c, ReleaseComparison) and c.baseline
            else "against the baseline"
        )
        tables.append(
            Table(
                anchor("release", metric),
                f"{label}: {what}",
                _delta_header(unit, lb),
                rows,
                note=f"change of geometric means; verdict needs |change| ≥ {c.method.threshold_pct:g}% and "
                f"q < {c.method.alpha:g} (Welch t on log values, Benjamini-Hochberg across the comparison); "
                "not testable: fewer than 2 repeats on a side, no verdict",
            )
        )
    return tables


def regression_table(c: ReleaseComparison) -> Table:
    """Every regressed cell, then every suspect (the counts above name both: none is left out)."""
    listed = [d for d in c.deltas if d.verdict == "regressed"] + [d for d in c.deltas if d.suspect]
    rows = tuple((d.metric, *_delta_row(d, True)[:9], ", ".join(c.suspects) or NA) for d in listed)
    head = ("Metric", *_delta_header("", True)[:9], "Suspects (manifest changes)")
    untestable = len(c.not_testable)
    note = (
        f"{untestable} cell/metric pairs were not testable and are not counted as unchanged: see Not testable"
        if untestable
        else ""
    )
    return Table("regressions", "Regressions and suspects", head, rows, note=note)


def not_testable_table(c: ReleaseComparison | RunSetComparison) -> Table:
    """Cells compared without enough repeats for any test: listed, never reported as unchanged."""
    rows = tuple(
        (
            d.cluster,
            d.workload,
            d.variant,
            d.metric,
            str(d.result.n_baseline),
            str(d.result.n_contender),
            pct(d.result.change_pct),
        )
        for d in c.deltas
        if d.result is not None and d.result.verdict == "not testable"
    )
    return Table(
        "not-testable",
        "Not testable",
        ("Cluster", "Workload", "Variant", "Metric", "n baseline", "n this release", "Change"),
        rows,
        note="a test needs at least 2 repeats on each side; these cells have no verdict",
    )


def manifest_table(c: ReleaseComparison | RunSetComparison) -> Table:
    diff = c.manifest_diff
    rows: list[tuple[str, ...]] = []
    if diff is not None:
        for kind, items in diff.by_kind():
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
    rows: tuple[tuple[str, str], ...] = (
        ("Runs used", m.runs_used),
        ("Two-sample interval", f"{m.confidence:.0%} {m.interval}"),
        ("Per-variant interval", f"{m.confidence:.0%} {m.summary_interval}"),
        ("Significance test", f"{m.test}, alpha {m.alpha:g}"),
        ("Multiple comparisons", f"{m.adjustment}; every verdict keeps its raw p and its q"),
        ("Verdict threshold", f"|change of geometric means| ≥ {m.threshold_pct:g}% and q < {m.alpha:g}"),
        ("Not testable", m.not_testable),
        (
            "Lookback",
            f"{m.lookback_method}; the last {m.lookback} releases, at least {m.lookback_min_history}, "
            f"|change| ≥ {m.threshold_pct:g}% and q < {m.alpha:g}",
        ),
        (
            "Noisy",
            f"n < {m.min_n} or the {m.confidence:.0%} {m.noisy} above {m.noisy_cv:.0%}",
        ),
        ("Share of gain", f"≥{m.confidence:.0%} {m.share_interval}, {m.n_resamples} draws, seed {m.seed}"),
    )
    if isinstance(c, ReleaseComparison) and c.factorial_design is not None:
        rows += (("Factorial effect intervals", f"{m.confidence:.0%} {m.factorial_interval}"),)
    rows += (("Schema version", c.schema_version),)
    return Table("method", "Method", ("Item", "Value"), rows)
