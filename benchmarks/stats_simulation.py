"""Do the statistics keep their promises? Seeded simulations with known truth, through the public
analysis functions only (the ones the comparison service calls), printing coverage and
false-positive/power tables.

    PYTHONPATH=. .venv/bin/python benchmarks/stats_simulation.py [--trials 1000] [--seed 0] [--only NAME ...]

Sizes n = 2, 3, 5, 10 repeats per side; CV 1, 2, 5%; normal noise (value = mu (1 + cv z)) and
log-normal noise (value = mu exp(s z), s = sqrt(log(1 + cv^2)), median mu); equal and unequal
cell sizes. Every table names the function it measures. The targets (issue 11, docs/statistics.md):
an interval shown as 95% covers the truth 93-97% of the time; false improved/regressed verdicts
<= 5% per identical-truth comparison and <= 5% per release after adjustment; power >= 80% for a
5% drop at n=5, CV 2%; a 20% drop at n=3, CV 2% detected.

Issue 27's scenarios, each with its before and after: ``zero_variance`` (deterministic 2x2 designs),
``two_values`` (a 2-value side, equal and 5x noisier), ``suspects`` (how many unchanged comparisons
read "suspect"), ``session_noise`` (a session level of 0-2% between releases, with and without the
between-session variance), ``session_reruns`` (that variance from reruns of the same images
against releases that also moved for real), ``drift`` (a steady loss per release: lookback vs
trend). Before-figures of code that changed come from running this file against the previous
commit (PYTHONPATH at its tree); docs/statistics.md shows both.

A coverage figure from T trials has a standard error of about sqrt(0.95 * 0.05 / T): 0.7 points
at the default 1000 trials. Runtime of a default run: about two minutes on one core.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ablate.backend.analysis import checkpointing as ckpt
from ablate.backend.analysis.ablation import LadderInput, analyze_ladders
from ablate.backend.analysis.comparison import Pair, compare_many
from ablate.backend.analysis.environment import common_shift
from ablate.backend.analysis.factorial import analyze_factorial
from ablate.backend.analysis.regression import (
    LookbackRequest,
    ReleasePair,
    compare_releases_many,
    lookback,
    trend_many,
)
from ablate.backend.analysis.session import rerun_variances, session_variance
from ablate.backend.analysis.stats import summarize_many

SIZES = (2, 3, 5, 10)
CVS = (0.01, 0.02, 0.05)
NOISES = ("normal", "lognormal")
MU = 100.0
METRIC = "throughput_tokens_per_s"  # higher is better: a "drop" is a regression


def draw(rng: np.random.Generator, n: int, mu: float, cv: float, noise: str) -> np.ndarray:
    z = rng.standard_normal(n)
    if noise == "normal":
        return mu * (1.0 + cv * z)
    return mu * np.exp(math.sqrt(math.log1p(cv * cv)) * z)


def pct(x: float) -> str:
    return f"{100.0 * x:5.1f}%"


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


def covers(lo: float | None, hi: float | None, truth: float) -> bool | None:
    if lo is None or hi is None:
        return None
    return lo <= truth <= hi


def rate(flags: Sequence[bool | None]) -> str:
    """Share of True among the defined flags; '-' when no trial had an interval at all."""
    known = [f for f in flags if f is not None]
    if not known:
        return "  none"
    shown = "" if len(known) == len(flags) else f" ({len(known)}/{len(flags)} shown)"
    return pct(sum(known) / len(known)) + shown


def method_of(obj: object) -> str:
    for name in ("interval_method", "ci_method", "method", "test"):
        value = getattr(obj, name, None)
        if isinstance(value, str) and value:
            return value
    return "?"


# ---------------------------------------------------------------------------------------- tables


def two_sample_coverage(trials: int, seed: int) -> None:
    """compare_many: the interval of the ratio contender/reference (true ratio 1.05)."""
    rows = []
    sizes = [(n, n) for n in SIZES] + [(2, 5), (3, 5), (3, 10), (5, 10)]
    method = "?"
    for noise in NOISES:
        for nc, nr in sizes:
            cells = []
            for cv in CVS:
                rng = np.random.default_rng([seed, 1, nc, nr, int(cv * 1000), NOISES.index(noise)])
                pairs = [
                    Pair(draw(rng, nc, MU * 1.05, cv, noise), draw(rng, nr, MU, cv, noise), "higher")
                    for _ in range(trials)
                ]
                res = compare_many(pairs)
                method = method_of(res[0])
                cells.append(rate([covers(r.ci_low, r.ci_high, 1.05) for r in res]))
            rows.append((noise, f"{nc} vs {nr}", *cells))
    table(
        f"Two-sample ratio interval coverage (compare_many, nominal 95%; method: {method})",
        ["noise", "n", *(f"CV {cv:.0%}" for cv in CVS)],
        rows,
    )


def two_sample_unequal_noise(trials: int, seed: int) -> None:
    """compare_many when one side is noisier than the other (contender CV 5%, reference CV 1%)."""
    rows = []
    for nc, nr in ((2, 10), (3, 3), (3, 10), (5, 5), (10, 3)):
        cells = []
        for noise in NOISES:
            rng = np.random.default_rng([seed, 10, nc, nr, NOISES.index(noise)])
            pairs = [
                Pair(draw(rng, nc, MU * 1.05, 0.05, noise), draw(rng, nr, MU, 0.01, noise), "higher")
                for _ in range(trials)
            ]
            res = compare_many(pairs)
            cells.append(rate([covers(r.ci_low, r.ci_high, 1.05) for r in res]))
        rows.append((f"{nc} vs {nr}", *cells))
    table(
        "Two-sample ratio interval coverage, unequal noise: contender CV 5%, reference CV 1% (compare_many)",
        ["n (contender vs reference)", *NOISES],
        rows,
    )


def per_rung_coverage(trials: int, seed: int) -> None:
    """summarize_many: the interval of one rung's centre (truth: the median mu)."""
    rows = []
    for noise in NOISES:
        for n in SIZES:
            cells = []
            for cv in CVS:
                rng = np.random.default_rng([seed, 2, n, int(cv * 1000), NOISES.index(noise)])
                res = summarize_many([draw(rng, n, MU, cv, noise) for _ in range(trials)])
                cells.append(rate([covers(s.ci_low, s.ci_high, MU) for s in res]))
            rows.append((noise, n, *cells))
    table(
        "Per-rung interval coverage (summarize_many, nominal 95%; truth = median)",
        ["noise", "n", *(f"CV {cv:.0%}" for cv in CVS)],
        rows,
    )


def _verdicts(results: Sequence[Any]) -> tuple[float, float, float]:
    v = [r.verdict for r in results]
    k = len(v)
    return (
        v.count("regressed") / k,
        v.count("improved") / k,
        sum(x not in ("regressed", "improved", "unchanged") for x in v) / k,
    )


def verdicts(trials: int, seed: int) -> None:
    """compare_releases_many: false verdicts under identical truth, power for 5% and 20% drops.

    Each trial is its own one-comparison batch, so any release-level adjustment has nothing to
    adjust: this is the per-comparison rate."""
    rows = []
    for noise in NOISES:
        for n in SIZES:
            for cv in CVS:
                rng = np.random.default_rng([seed, 3, n, int(cv * 1000), NOISES.index(noise)])
                out = []
                for drop in (0.0, 0.05, 0.20):
                    res = []
                    for _ in range(trials):
                        pair = ReleasePair(
                            draw(rng, n, MU, cv, noise), draw(rng, n, MU * (1 - drop), cv, noise), METRIC
                        )
                        res.extend(compare_releases_many([pair]))
                    reg, imp, untestable = _verdicts(res)
                    out.append((reg, imp, untestable))
                (r0, i0, u0), (r5, _, _), (r20, _, _) = out
                rows.append((noise, n, f"{cv:.0%}", pct(r0 + i0), pct(r5), pct(r20), pct(u0)))
    table(
        "Release-over-release verdicts per comparison (compare_releases_many, threshold 3%, alpha 0.05)",
        [
            "noise",
            "n",
            "CV",
            "false verdicts (no change)",
            "power: 5% drop",
            "power: 20% drop",
            "not testable",
        ],
        rows,
    )


def release_level(trials: int, seed: int) -> None:
    """compare_releases_many on a whole release: 200 cell/metric comparisons in one batch."""
    rows = []
    m = 200
    for n, cv, noise in (
        (3, 0.05, "normal"),
        (5, 0.05, "normal"),
        (5, 0.02, "lognormal"),
        (10, 0.05, "lognormal"),
    ):
        rng = np.random.default_rng([seed, 4, n, int(cv * 1000), NOISES.index(noise)])
        t = max(20, trials // 10)
        any_false = 0
        any_false_mixed = 0
        found = 0
        for _ in range(t):
            pairs = [
                ReleasePair(draw(rng, n, MU, cv, noise), draw(rng, n, MU, cv, noise), METRIC)
                for _ in range(m)
            ]
            res = compare_releases_many(pairs)
            any_false += any(r.verdict in ("regressed", "improved") for r in res)
            # 190 unchanged cells and 10 real 10% drops
            pairs = pairs[:190] + [
                ReleasePair(draw(rng, n, MU, cv, noise), draw(rng, n, MU * 0.9, cv, noise), METRIC)
                for _ in range(10)
            ]
            res = compare_releases_many(pairs)
            any_false_mixed += any(r.verdict in ("regressed", "improved") for r in res[:190])
            found += sum(r.verdict == "regressed" for r in res[190:])
        rows.append(
            (noise, n, f"{cv:.0%}", t, pct(any_false / t), pct(any_false_mixed / t), pct(found / (10 * t)))
        )
    table(
        "Per release: 200 comparisons in one batch (compare_releases_many)",
        [
            "noise",
            "n",
            "CV",
            "releases",
            "P(any false verdict), all unchanged",
            "P(any false verdict), 190 unchanged + 10 drops",
            "10% drops found",
        ],
        rows,
    )


def noisy_flag(trials: int, seed: int) -> None:
    """summarize_many: how often a rung is flagged noisy (threshold CV 5%). Clean hosts: CV 1-2%;
    loaded ones: CV 8% and more (a busy 2-core box spread the demo's repeats 25-69%)."""
    rows = []
    cvs = (0.01, 0.02, 0.05, 0.08, 0.12)
    for n in SIZES:
        cells = []
        for cv in cvs:
            rng = np.random.default_rng([seed, 5, n, int(cv * 1000)])
            res = summarize_many([draw(rng, n, MU, cv, "normal") for _ in range(trials)])
            cells.append(pct(sum(s.noisy for s in res) / trials))
        rows.append((n, trials, *cells))
    table(
        "Noisy flag rate (summarize_many, noisy_cv 5%, normal noise): want <= 5% at 1-2%, >= 80% at 8% (n=5)",
        ["n", "trials", *(f"true CV {cv:.0%}" for cv in cvs)],
        rows,
    )


def lookback_alarms(trials: int, seed: int) -> None:
    """lookback: a new release median against K earlier medians (each a median of 5 repeats)."""
    rows = []
    for k in (2, 3, 4, 5, 8):
        for cv in (0.005, 0.02, 0.05):
            rng = np.random.default_rng([seed, 6, k, int(cv * 1000)])
            false = found = 0
            for _ in range(trials):
                hist = [float(np.median(draw(rng, 5, MU, cv, "normal"))) for _ in range(k)]
                same = float(np.median(draw(rng, 5, MU, cv, "normal")))
                drop = float(np.median(draw(rng, 5, MU * 0.9, cv, "normal")))
                v0 = lookback(same, hist, k, metric=METRIC).verdict
                v1 = lookback(drop, hist, k, metric=METRIC).verdict
                false += v0 in ("regressed", "improved")
                found += v1 == "regressed"
            rows.append((k, f"{cv:.1%}", pct(false / trials), pct(found / trials)))
    table(
        "Lookback (lookback with the default settings): false alarms and 10% drops found",
        ["history releases", "CV", "false alarms (no change)", "10% drop found"],
        rows,
    )


def factorial(trials: int, seed: int) -> None:
    """analyze_factorial, 2x2: main effect A = x1.10, B = x1.05, true synergy AB = x1.04 (full size:
    the A effect is 4% larger with B on than off)."""
    rows = []
    truth_a, truth_b, truth_ab = 1.10, 1.05, 1.04
    mus = {(): MU, ("A",): MU * truth_a, ("B",): MU * truth_b, ("A", "B"): MU * truth_a * truth_b * truth_ab}
    # Main effect of A averaged over B (log scale): log a + log(ab) / 2.
    main_a = math.exp(math.log(truth_a) + math.log(truth_ab) / 2)
    designs: list[tuple[str, dict, dict]] = [
        ("equal n=3, CV 2%", dict.fromkeys(mus, 3), dict.fromkeys(mus, 0.02)),
        ("equal n=5, CV 2%", dict.fromkeys(mus, 5), dict.fromkeys(mus, 0.02)),
        (
            "unequal: noisy cells (CV 5%) n=3, quiet (CV 1%) n=10",
            {(): 10, ("A",): 10, ("B",): 3, ("A", "B"): 3},
            {(): 0.01, ("A",): 0.01, ("B",): 0.05, ("A", "B"): 0.05},
        ),
    ]
    for label, ns, cvs in designs:
        rng = np.random.default_rng([seed, 7, len(label)])
        cov_a, cov_ab, est_ab = [], [], []
        for _ in range(trials):
            cells = [(list(c), draw(rng, ns[c], mus[c], cvs[c], "normal")) for c in mus]
            fa = analyze_factorial(cells, METRIC, factors=("A", "B"))
            a = fa.main_effects[0]
            ab = fa.interactions[0]
            cov_a.append(covers(a.ci_low, a.ci_high, main_a))
            cov_ab.append(covers(ab.ci_low, ab.ci_high, truth_ab))
            est_ab.append(ab.factor)
        rows.append((label, rate(cov_a), f"x{float(np.mean(est_ab)):.4f}", rate(cov_ab)))
    table(
        f"Factorial 2x2 (analyze_factorial): true main A x{main_a:.4f}, true interaction x{truth_ab}",
        ["design", "main A coverage", "mean reported interaction", "interaction coverage (truth x1.04)"],
        rows,
    )


def shares(trials: int, seed: int) -> None:
    """analyze_ladders: Base -> +X (x1.04) -> +Y (x1.10). True share of +X = log 1.04 / log 1.144."""
    rows = []
    truth = math.log(1.04) / math.log(1.04 * 1.10)
    for n, cv in ((3, 0.02), (5, 0.02), (5, 0.05), (10, 0.02)):
        rng = np.random.default_rng([seed, 8, n, int(cv * 1000)])
        inputs = [
            LadderInput(
                [
                    ("Base", draw(rng, n, MU, cv, "normal")),
                    ("+X", draw(rng, n, MU * 1.04, cv, "normal")),
                    ("+Y", draw(rng, n, MU * 1.04 * 1.10, cv, "normal")),
                ],
                METRIC,
            )
            for _ in range(trials)
        ]
        res = analyze_ladders(inputs)
        got = [lad.variant("+X") for lad in res]
        vals = [v.share for v in got if v is not None and v.share is not None]
        lo = [getattr(v, "share_ci_low", None) for v in got]
        hi = [getattr(v, "share_ci_high", None) for v in got]
        cov = rate([covers(a, b, truth) for a, b in zip(lo, hi, strict=True)])
        spread = f"{np.percentile(vals, 5):+.0%} .. {np.percentile(vals, 95):+.0%}" if vals else "-"
        rows.append((n, f"{cv:.0%}", pct(len(vals) / trials), spread, cov))
    # A ladder whose total gain is small (x1.01 then x1.00): shares blow up.
    rng = np.random.default_rng([seed, 9])
    inputs = [
        LadderInput(
            [
                ("Base", draw(rng, 3, MU, 0.02, "normal")),
                ("+X", draw(rng, 3, MU * 1.01, 0.02, "normal")),
                ("+Y", draw(rng, 3, MU * 1.01, 0.02, "normal")),
            ],
            METRIC,
        )
        for _ in range(trials)
    ]
    res = analyze_ladders(inputs)
    vals = [v.share for lad in res if (v := lad.variant("+X")) is not None and v.share is not None]
    spread = f"{np.percentile(vals, 5):+.0%} .. {np.percentile(vals, 95):+.0%}" if vals else "-"
    rows.append(("3 (total x1.01)", "2%", pct(len(vals) / trials), spread, "-"))
    table(
        f"Share of the gain of +X (analyze_ladders; truth {truth:.1%})",
        ["n", "CV", "share shown", "shown shares, 5-95th percentile", "share interval coverage"],
        rows,
    )


def zero_variance(trials: int, seed: int) -> None:
    """analyze_factorial on deterministic 2x2 memory designs: every cell's repeats equal (issue 27)."""
    rows = []
    for n in (2, 3, 5):
        rng = np.random.default_rng([seed, 12, n])
        tiny_p = named = 0
        for _ in range(trials):
            level = float(rng.uniform(10.0, 80.0))
            mus = {(): level, ("A",): level * 0.8, ("B",): level * 1.1, ("A", "B"): level * 0.85}
            fa = analyze_factorial([(list(k), [v] * n) for k, v in mus.items()], "peak_memory_gib")
            effects = (*fa.main_effects, *fa.interactions)
            tiny_p += any(e.p_value is not None for e in effects)
            named += any("zero" in r and "variance" in r for r in fa.reasons)
        rows.append((n, trials, pct(tiny_p / trials), pct(named / trials)))
    table(
        "Deterministic 2x2 memory designs (analyze_factorial): want no p-value, zero variance named",
        ["n per cell", "designs", "a p-value shown (rounding, p ~ 1e-30)", "zero variance named"],
        rows,
    )


def two_values(trials: int, seed: int) -> None:
    """compare_many with a 2-value side: coverage when that side shares the other's noise (CV 2%)
    and when it is 5x noisier (CV 10% vs 2%), log-normal noise, true ratio 1.05."""
    rows = []
    method = "?"
    for nc, nr in ((2, 2), (2, 3), (2, 5), (2, 10), (5, 2)):
        cells = []
        for cv_c in (0.02, 0.10):
            rng = np.random.default_rng([seed, 13, nc, nr, int(cv_c * 100)])
            pairs = [
                Pair(
                    draw(rng, nc, MU * 1.05, cv_c, "lognormal"),
                    draw(rng, nr, MU, 0.02, "lognormal"),
                    "higher",
                )
                for _ in range(trials)
            ]
            res = compare_many(pairs)
            method = res[0].test
            cells.append(rate([covers(r.ci_low, r.ci_high, 1.05) for r in res]))
        rows.append((f"{nc} vs {nr}", *cells))
    table(
        f"2-value sides: ratio interval coverage (compare_many, nominal 95%; test: {method})",
        ["n (contender vs reference)", "contender CV 2% (equal)", "contender CV 10% (5x noisier)"],
        rows,
    )


def _is_suspect(r: Any) -> bool:
    # Before issue 27 a suspect was any unchanged row past the threshold (no ``suspect`` field).
    flag = getattr(r, "suspect", None)
    return (
        bool(flag)
        if flag is not None
        else r.verdict == "unchanged" and r.indicated in ("improved", "regressed")
    )


def suspects(trials: int, seed: int) -> None:
    """compare_releases_many on releases of 20 unchanged comparisons: how many rows read "suspect"."""
    rows = []
    m = 20
    releases = max(20, trials // m)
    for n in (3, 5, 10):
        for cv in (0.02, 0.05):
            rng = np.random.default_rng([seed, 14, n, int(cv * 1000)])
            flagged = any_release = 0
            for _ in range(releases):
                pairs = [
                    ReleasePair(draw(rng, n, MU, cv, "lognormal"), draw(rng, n, MU, cv, "lognormal"), METRIC)
                    for _ in range(m)
                ]
                res = compare_releases_many(pairs)
                k = sum(_is_suspect(r) for r in res)
                flagged += k
                any_release += k > 0
            rows.append(
                (n, f"{cv:.0%}", releases * m, pct(flagged / (releases * m)), pct(any_release / releases))
            )
    table(
        "Suspects among unchanged comparisons (compare_releases_many; releases of 20, threshold 3%)",
        ["n", "CV", "comparisons", "suspect per comparison", "releases with a suspect"],
        rows,
    )


def _session_draw(
    rng: np.random.Generator, mult: np.ndarray, level: float, n: int, cv: float
) -> list[np.ndarray]:
    """One release's session: every cell shifted by its own session effect (log-normal, ``level``)."""
    shift = np.exp(level * rng.standard_normal(mult.size))
    return [draw(rng, n, MU * m * s, cv, "lognormal") for m, s in zip(mult, shift, strict=True)]


def session_noise(trials: int, seed: int) -> None:
    """compare_releases_many with and without the between-session variance (session_variance).

    A pool of 20 cells; each (release, cell) session shifts the cell's repeats by a shared log-normal
    effect of the given level; 5 earlier releases (the last is the baseline) give tau^2; the new
    release has 19 unchanged cells and one 15% drop, compared as one family. Before: session noise
    ignored (what compare_releases_many did without session_var)."""
    rows = []
    cells, earlier = 20, 5
    releases = max(20, trials // cells)
    for level in (0.0, 0.01, 0.02):
        for n in (3, 5, 10):
            cv = 0.02
            rng = np.random.default_rng([seed, 15, n, int(level * 1000)])
            stats_: dict[str, list[float]] = {
                k: [] for k in ("fb", "fa", "fm", "cb", "ca", "cm", "pb", "pa", "pm", "cdb", "cda", "cdm")
            }
            taus = []
            for _ in range(releases):
                truth = np.ones(cells)
                truth[-1] = 0.85

                history = [_session_draw(rng, np.ones(cells), level, n, cv) for _ in range(earlier)]
                new = _session_draw(rng, truth, level, n, cv)
                sv = session_variance([[h[i] for h in history] for i in range(cells)])
                tau2 = sv.tau2 or 0.0
                taus.append(math.sqrt(tau2))
                for tag in ("b", "a", "m"):  # before, after (Welch), after moderated
                    after = tag != "b"
                    pairs = [
                        ReleasePair(
                            history[-1][i],
                            new[i],
                            METRIC,
                            session_var=2 * tau2 if after else 0.0,
                            session_df=sv.df if after else None,
                        )
                        for i in range(cells)
                    ]
                    res = compare_releases_many(pairs, moderate=tag == "m")
                    for r in res[:-1]:
                        stats_["f" + tag].append(r.verdict in ("regressed", "improved"))
                        stats_["c" + tag].append(bool(covers(r.change_ci_low, r.change_ci_high, 0.0)))
                    d = res[-1]
                    stats_["p" + tag].append(d.verdict == "regressed")
                    stats_["cd" + tag].append(bool(covers(d.change_ci_low, d.change_ci_high, -15.0)))
            m = {k: pct(sum(v) / len(v)) for k, v in stats_.items()}
            rows.append(
                (
                    f"{level:.0%}",
                    n,
                    releases * (cells - 1),
                    f"{float(np.median(taus)):.2%}",
                    f"{m['fb']} / {m['fa']} / {m['fm']}",
                    f"{m['cb']} / {m['ca']} / {m['cm']}",
                    f"{m['pb']} / {m['pa']} / {m['pm']}",
                    f"{m['cdb']} / {m['cda']} / {m['cdm']}",
                )
            )
    table(
        "Session noise (compare_releases_many + session_variance; 20 cells, 5 earlier releases, CV 2%); "
        "before / after / after, moderated",
        [
            "session level",
            "n",
            "unchanged comparisons",
            "median tau estimate",
            "false verdicts",
            "coverage (unchanged)",
            "15% drop found",
            "coverage (drop)",
        ],
        rows,
    )


def session_reruns(trials: int, seed: int) -> None:
    """The test against the release 5 back, its between-session variance from successive releases or
    from reruns of the same images (issue 27: a same-session baseline's re-run and its own earlier run).

    A pool of 20 cells and 5 earlier releases; between releases every cell also moves for real by
    ``wander`` (a random walk on the log scale), which release-to-release differences hold and
    reruns do not. The baseline (the newest earlier release) is re-run beside the new release (one
    session, its effect shared); the new release is the baseline's level but for one cell 15% down.
    Its test against the release 5 back (the service's K-back comparison, moderated t) is scored
    against the truth: coverage of the 19 other cells' intervals, false verdicts (regressed or improved
    where the true change is within the 3% threshold or of the other sign), the drop found."""
    rows = []
    cells, earlier, cv = 20, 5, 0.02
    releases = max(20, trials // cells)
    for wander in (0.0, 0.02):
        for level in (0.01, 0.02):
            for n in (3, 5):
                rng = np.random.default_rng([seed, 32, n, int(level * 1000), int(wander * 1000)])
                got: dict[str, list[float]] = {
                    k: [] for k in ("tc", "tr", "cc", "cr", "fc", "fr", "pc", "pr")
                }
                for _ in range(releases):
                    steps = wander * rng.standard_normal((earlier, cells))
                    steps[0] = 0.0
                    walk = np.exp(np.cumsum(steps, axis=0))  # each earlier release's true level
                    history = [_session_draw(rng, walk[j], level, n, cv) for j in range(earlier)]
                    truth = walk[-1].copy()
                    truth[-1] *= 0.85
                    shift = np.exp(level * rng.standard_normal(cells))  # the re-run's and new's session
                    rerun = [draw(rng, n, MU * walk[-1][i] * shift[i], cv, "lognormal") for i in range(cells)]
                    new = [draw(rng, n, MU * truth[i] * shift[i], cv, "lognormal") for i in range(cells)]
                    # The service's chain: earlier releases, the baseline's values being its re-run's.
                    chain = session_variance(
                        [[*(h[i] for h in history[:-1]), rerun[i]] for i in range(cells)]
                    )
                    reruns = rerun_variances({0: [(history[-1][i], rerun[i]) for i in range(cells)]})[0]
                    change = (truth / walk[0] - 1.0) * 100.0
                    for tag, sv in (("c", chain), ("r", reruns)):
                        tau2 = sv.tau2 or 0.0
                        got["t" + tag].append(math.sqrt(tau2))
                        pairs = [
                            ReleasePair(history[0][i], new[i], METRIC, session_var=2 * tau2, session_df=sv.df)
                            for i in range(cells)
                        ]
                        res = compare_releases_many(pairs, moderate=True)
                        for r, c in zip(res[:-1], change[:-1], strict=True):
                            got["c" + tag].append(bool(covers(r.change_ci_low, r.change_ci_high, float(c))))
                            called = {"regressed": -1, "improved": 1}.get(r.verdict, 0)
                            got["f" + tag].append(called != 0 and (abs(c) < 3.0 or called * c < 0))
                        got["p" + tag].append(res[-1].verdict == "regressed")
                m = {k: pct(sum(v) / len(v)) for k, v in got.items() if k[0] != "t"}
                rows.append(
                    (
                        f"{wander:.0%}",
                        f"{level:.0%}",
                        n,
                        releases * (cells - 1),
                        f"{float(np.median(got['tc'])):.2%} / {float(np.median(got['tr'])):.2%}",
                        f"{m['cc']} / {m['cr']}",
                        f"{m['fc']} / {m['fr']}",
                        f"{m['pc']} / {m['pr']}",
                    )
                )
    table(
        "Session noise from reruns of the same images (20 cells, 5 earlier releases, CV 2%, test against "
        "the release 5 back); release-to-release / reruns",
        [
            "real moves a release",
            "session level",
            "n",
            "comparisons",
            "median tau estimate",
            "coverage",
            "false verdicts",
            "15% drop found",
        ],
        rows,
    )


def drift(trials: int, seed: int) -> None:
    """lookback (before), trend_many and the test against the release K back (after) on a steady loss
    per release or one earlier step: 5 earlier releases and this one, each 5 repeats at CV 2% plus a
    1% session effect (the K-back test adds the comparison's 2 tau^2, tau known, 10 df)."""
    scenarios: list[tuple[str, Callable[[int], float]]] = [
        ("0% per release", lambda i: 1.0),
        ("1% per release", lambda i: 0.99**i),
        ("2% per release", lambda i: 0.98**i),
        ("3% per release", lambda i: 0.97**i),
        ("one step of -5%, 3 releases back", lambda i: 0.95 if i >= 3 else 1.0),
        ("one step of -10%, 3 releases back", lambda i: 0.90 if i >= 3 else 1.0),
    ]
    tau = 0.01
    rows = []
    for j, (name, level) in enumerate(scenarios):
        rng = np.random.default_rng([seed, 16, j])
        looked = trended = far = either = 0
        for _ in range(trials):
            values = [
                draw(rng, 5, MU * level(i) * math.exp(tau * rng.standard_normal()), 0.02, "lognormal")
                for i in range(6)
            ]
            medians = [float(np.median(v)) for v in values]
            request = LookbackRequest(medians[-1], medians[:-1], METRIC)
            looked += lookback(medians[-1], medians[:-1], 5, metric=METRIC).verdict == "regressed"
            t = trend_many([request], 5, adjust=False)[0].verdict == "regressed"
            pair = ReleasePair(values[0], values[-1], METRIC, session_var=2 * tau * tau, session_df=10.0)
            k = compare_releases_many([pair], adjust=False)[0].verdict == "regressed"
            trended += t
            far += k
            either += t or k
        rows.append(
            (
                name,
                trials,
                pct(looked / trials),
                pct(trended / trials),
                pct(far / trials),
                pct(either / trials),
            )
        )
    table(
        "Drift: 6 releases (CV 2%, 1% session level, n=5); flagged regressed",
        ["truth", "trials", "before: lookback", "trend", "vs the release 5 back", "trend or 5 back"],
        rows,
    )


def family_power(trials: int, seed: int) -> None:
    """compare_releases_many: a 5% drop at CV 2% alone and as 1 of 20 comparisons (19 unchanged)."""
    rows = []
    for n in (3, 5, 10):
        rng = np.random.default_rng([seed, 17, n])
        alone = among = among_mod = 0
        for _ in range(trials):
            pairs = [
                ReleasePair(draw(rng, n, MU, 0.02, "lognormal"), draw(rng, n, MU, 0.02, "lognormal"), METRIC)
                for _ in range(19)
            ]
            drop = ReleasePair(
                draw(rng, n, MU, 0.02, "lognormal"), draw(rng, n, MU * 0.95, 0.02, "lognormal"), METRIC
            )
            among += compare_releases_many([*pairs, drop])[-1].verdict == "regressed"
            among_mod += compare_releases_many([*pairs, drop], moderate=True)[-1].verdict == "regressed"
            alone += compare_releases_many([drop])[0].verdict == "regressed"
        rows.append((n, trials, pct(alone / trials), pct(among / trials), pct(among_mod / trials)))
    table(
        "Power inside the release: a 5% drop at CV 2% (compare_releases_many, BH)",
        [
            "n",
            "trials",
            "alone (Welch)",
            "as 1 of 20 (Welch)",
            "as 1 of 20 (moderated t, the release's test)",
        ],
        rows,
    )


def environment(trials: int, seed: int) -> None:
    """common_shift over the 5 rungs of a workload, release over release (CV 2% within a session,
    a 1% session effect per cell, the comparison's between-session variance 2 tau^2 added): how often
    every rung reads as moved alike. Before, nothing was said: the A/A rerun on a loaded host read a
    regression or suspect on every rung."""
    scenarios: list[tuple[str, Sequence[float], float, float]] = [
        # (name, true factor per rung, extra per-rung spread of the factor, CV of the new release)
        ("unchanged", (1.0,) * 5, 0.0, 0.02),
        ("loaded host: every rung x0.6 (CV 10%)", (0.6,) * 5, 0.0, 0.10),
        ("loaded host: x0.6, rungs differ by 3% (CV 10%)", (0.6,) * 5, 0.03, 0.10),
        ("loaded host: every rung x0.85 (CV 5%)", (0.85,) * 5, 0.0, 0.05),
        ("release: one rung -15%", (1.0, 1.0, 0.85, 1.0, 1.0), 0.0, 0.02),
        ("release: two rungs -10%, -20%", (1.0, 1.0, 1.0, 0.9, 0.8), 0.0, 0.02),
        ("release: rungs -5% .. -25%", (0.95, 0.9, 0.85, 0.8, 0.75), 0.0, 0.02),
        ("release: every rung -10%", (0.9,) * 5, 0.0, 0.02),
    ]
    tau = 0.01
    rows = []
    for i, (name, factors, spread, cv_new) in enumerate(scenarios):
        for n in (3, 5):
            rng = np.random.default_rng([seed, 18, i, n])
            alike = every_rung_flagged = 0
            for _ in range(trials):
                pairs = []
                for f in factors:
                    old = draw(rng, n, MU * math.exp(tau * rng.standard_normal()), 0.02, "lognormal")
                    mu_new = MU * f * math.exp(tau * rng.standard_normal() + spread * rng.standard_normal())
                    new = draw(rng, n, mu_new, cv_new, "lognormal")
                    pairs.append(ReleasePair(old, new, METRIC, session_var=2 * tau * tau, session_df=10.0))
                alike += common_shift(pairs).alike
                results = compare_releases_many(pairs)
                every_rung_flagged += all(r.verdict == "regressed" or r.suspect for r in results)
            rows.append((name, n, trials, pct(every_rung_flagged / trials), pct(alike / trials)))
    table(
        "Environment: every rung moved alike (common_shift; 5 rungs, 1% session level)",
        ["truth", "n", "trials", "every rung regressed or suspect", "read as moved alike"],
        rows,
    )


def moderated(trials: int, seed: int) -> None:
    """compare_releases_many with and without moderate=True on releases of 20 comparisons: 19 unchanged
    and one 10% drop at CV 2%, log-normal noise. "3 workloads" gives the cells CVs of 1%, 2% and 5%
    in turn, each CV its own pool (a workload); "one pool" puts those same cells in one pool; "rungs
    differ" has one pool whose cells run at CV 1.5%, 2% and 3%. A shared prior must not shorten the
    noisy cells' intervals (the coverage of the noisiest class of cells)."""
    mixed = [(0.01, 0.02, 0.05)[i % 3] for i in range(19)] + [0.02]
    scenarios: list[tuple[str, list[float], bool]] = [
        ("CV 2%, one pool", [0.02] * 20, False),
        ("3 workloads (CV 1/2/5%), a pool each", mixed, True),
        ("CV 1/2/5% in one pool", mixed, False),
        (
            "rungs differ (CV 1.5/2/3%), one pool",
            [(0.015, 0.02, 0.03)[i % 3] for i in range(19)] + [0.02],
            False,
        ),
    ]
    rows = []
    for j, (name, cvs, by_cv) in enumerate(scenarios):
        for n in (3, 5):
            rng = np.random.default_rng([seed, 19, j, n])
            false = {False: 0, True: 0}
            cover = {False: 0, True: 0}
            cover_noisy = {False: 0, True: 0}
            found = {False: 0, True: 0}
            top = max(cvs[:19])
            noisy_cells = sum(c == top for c in cvs[:19]) * trials
            for _ in range(trials):
                pairs = [
                    ReleasePair(
                        draw(rng, n, MU, cv, "lognormal"),
                        draw(rng, n, MU * (0.9 if i == 19 else 1.0), cv, "lognormal"),
                        METRIC,
                        pool=f"{cv}" if by_cv else None,
                    )
                    for i, cv in enumerate(cvs)
                ]
                for mod in (False, True):
                    res = compare_releases_many(pairs, moderate=mod)
                    for cv, r in zip(cvs[:19], res[:19], strict=True):
                        false[mod] += r.verdict in ("improved", "regressed")
                        hit = r.change_ci_low is not None and r.change_ci_low <= 0 <= (r.change_ci_high or 0)
                        cover[mod] += hit
                        cover_noisy[mod] += hit and cv == top
                    found[mod] += res[19].verdict == "regressed"
            unchanged = 19 * trials

            def both(counts: dict[bool, int], total: int) -> str:
                return " / ".join(pct(counts[m] / total) for m in (False, True))

            rows.append(
                (
                    name,
                    n,
                    trials,
                    both(false, unchanged),
                    both(cover, unchanged),
                    f"CV {top:.1%}: " + both(cover_noisy, noisy_cells),
                    both(found, trials),
                )
            )
    table(
        "Moderated t: releases of 20 comparisons (19 unchanged, one 10% drop); Welch / moderated",
        [
            "cells",
            "n",
            "releases",
            "false verdicts",
            "coverage (unchanged)",
            "coverage (noisiest)",
            "10% drop found",
        ],
        rows,
    )


ADVISOR_SHAPE = ckpt.ModelShape(
    n_layers=8, hidden=512, n_heads=8, seq_len=256, micro_batch=16, vocab_size=32000,
    precision="fp32", weights_fp32=True, attention="sdpa",
)  # fmt: skip
ADVISOR_DESIGNS: dict[str, tuple[int, ...]] = {
    "none (model shape only)": (),
    "k=0 and k=L, 3 runs each": (0, 0, 0, 8, 8, 8),
    "k=0 and k=L, 5 runs each": (0,) * 5 + (8,) * 5,
    "one run at k=0,2,4,6,8": (0, 2, 4, 6, 8),
}


def _advisor_truth(rng: np.random.Generator, prior: ckpt.MemoryPrior) -> Callable[[int], float]:
    """A true peak(k) drawn from the advisor's own prior (its intercept and per-layer multipliers),
    so that a calibrated model covers 95% whatever the draw."""
    alpha = (
        prior.fixed_gib
        + math.hypot(prior.baseline_sd_gib, ckpt.STATIC_SD * (prior.static_gib + prior.head_gib))
        * rng.standard_normal()
    )
    psi_a, psi_c = np.maximum(1.0 + ckpt.PSI_SD * rng.standard_normal(2), 0.2)

    def peak(k: int) -> float:
        full = ckpt.full_layers(k, prior.n_layers)
        return float(
            alpha + psi_a * prior.layer_activation_gib * full + psi_c * prior.layer_checkpointed_gib * k
        )

    return peak


def advisor(trials: int, seed: int) -> None:
    """checkpointing.recommend: does a new run's peak memory fall in its 95% prediction interval?
    Each trial draws a true peak(k) from the prior, measures the design's runs with multiplicative
    log-normal noise at the cluster's CV, and predicts one new run at a random k. Before: the noise
    prior fixed at 2% worth 2 runs. Now, with nothing to pool: the 2% fallback worth a quarter of a
    run; and pooled_noise over the cluster's other repeated cells (4 cells of 3 runs: 8 degrees of
    freedom)."""
    prior = ckpt.memory_prior(ADVISOR_SHAPE, baseline_gib=0.35, baseline_sd_gib=0.25)
    rows = []
    for i, (design, ks) in enumerate(ADVISOR_DESIGNS.items()):
        for cv in (0.02, 0.05):
            rng = np.random.default_rng([seed, 20, i, int(cv * 1000)])
            s = math.sqrt(math.log1p(cv * cv))
            hits = {"before": 0, "fallback": 0, "pooled": 0}
            widths = {"before": 0.0, "fallback": 0.0, "pooled": 0.0}
            for _ in range(trials):
                peak = _advisor_truth(rng, prior)
                obs = [
                    ckpt.Observation(j, k, "g", peak(k) * math.exp(s * rng.standard_normal()))
                    for j, k in enumerate(ks)
                ]
                cells = [list(100.0 * np.exp(s * rng.standard_normal(3))) for _ in range(4)]
                k_new = int(rng.integers(0, prior.n_layers + 1))
                new = peak(k_new) * math.exp(s * rng.standard_normal())
                for name, noise in (
                    ("before", ckpt.Noise(ckpt.NoiseEstimate(0.02, 2.0, prior_dof=2.0))),
                    ("fallback", None),
                    ("pooled", ckpt.Noise(ckpt.pooled_noise(cells))),
                ):
                    row = ckpt.recommend(prior, obs, device_memory_gib=1e6, target_group="g", noise=noise)
                    lo, hi = row.table[k_new].low_gib, row.table[k_new].high_gib
                    hits[name] += lo <= new <= hi
                    widths[name] += (hi - lo) / 2 / peak(k_new) / trials
            rows.append(
                (design, f"{cv:.0%}", trials, pct(hits["before"] / trials), pct(hits["fallback"] / trials),
                 pct(hits["pooled"] / trials),
                 f"{widths['before']:.1%} / {widths['fallback']:.1%} / {widths['pooled']:.1%}")
            )  # fmt: skip
    table(
        "Advisor: a new run's peak memory in its 95% prediction interval (recommend)",
        ["runs of the workload", "noise CV", "trials", "before: 2% worth 2 runs",
         "now, nothing to pool: 2% worth 1/4", "now, pooled (4 cells x 3)",
         "half-width before / fallback / pooled"],
        rows,
    )  # fmt: skip


TABLES: dict[str, Callable[[int, int], None]] = {
    "two_sample": two_sample_coverage,
    "two_sample_unequal": two_sample_unequal_noise,
    "per_rung": per_rung_coverage,
    "verdicts": verdicts,
    "release": release_level,
    "noisy": noisy_flag,
    "lookback": lookback_alarms,
    "factorial": factorial,
    "shares": shares,
    "zero_variance": zero_variance,
    "two_values": two_values,
    "suspects": suspects,
    "session_noise": session_noise,
    "session_reruns": session_reruns,
    "drift": drift,
    "family_power": family_power,
    "environment": environment,
    "moderated": moderated,
    "advisor": advisor,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=1000, help="simulated trials per table cell")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", choices=sorted(TABLES), help="tables to print (default: all)")
    args = ap.parse_args()
    if args.trials < 1:
        ap.error("--trials must be at least 1")
    for name in args.only or TABLES:
        start = time.process_time()
        TABLES[name](args.trials, args.seed)
        print(f"\n({name}: {time.process_time() - start:.1f} s CPU)")


if __name__ == "__main__":
    main()
