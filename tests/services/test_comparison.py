"""The release comparison on real data (both databases), checked against numpy/scipy recomputation."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from datetime import date
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats
from sqlalchemy import event

from ablate.backend.analysis.stats import MODERATED_LOG_TEST, WELCH_LOG_TEST
from ablate.backend.db.database import Database
from ablate.backend.services import comparison as svc
from ablate.backend.services.errors import NotFound
from tests.reports import seed
from tests.reports.seed import REL_2510, REL_2511, REL_2512, ReleaseSpec

N = 499  # share draws: small so the suite stays fast
OPTS = svc.ComparisonOptions(n_resamples=N)
TPUT = "throughput_tokens_per_s"
MEM = "peak_memory_gib"
LLAMA = "deepspeed/llama3-8b"
QWEN = "megatron/qwen2-7b"
LAST = seed.VARIANTS[-1]
REF = f"{seed.IMAGE}:25.12"


def _welch(c: list[float], r: list[float]) -> tuple[float, float, float, float]:
    """(log ratio of geometric means, CI low, CI high, p) recomputed with scipy's Welch t on logs."""
    lc, lr = np.log(c), np.log(r)
    res = stats.ttest_ind(lc, lr, equal_var=False)
    ci = res.confidence_interval(0.95)
    return float(lc.mean() - lr.mean()), float(ci.low), float(ci.high), float(res.pvalue)


def _log_t(values: list[float]) -> tuple[float, float]:
    y = np.log(values)
    half = stats.t.ppf(0.975, y.size - 1) * y.std(ddof=1) / math.sqrt(y.size)
    return math.exp(y.mean() - half), math.exp(y.mean() + half)


@pytest.fixture
def standard(database: Database) -> Database:
    seed.seed_standard(database)
    return database


def _build(database: Database, ref: str = REF, **kw) -> svc.ReleaseComparison:
    with database.read() as s:
        return svc.build_release_comparison(s, ref, options=kw.pop("options", OPTS), **kw)


def test_ladder_matches_independent_recomputation(standard: Database) -> None:
    c = _build(standard)
    assert c.baseline is not None and c.baseline.ref == f"{seed.IMAGE}:25.11"
    assert c.lookback_releases == (f"{seed.IMAGE}:25.10", f"{seed.IMAGE}:25.11")
    assert c.metrics == (TPUT, MEM) and c.baseline_variant == "Base"
    assert [v.name for v in c.variants] == seed.VARIANTS
    ladder = c.ladder_map("h200-2x8", TPUT)[QWEN]
    base = seed.expected_values(REL_2512, QWEN, "Base")
    for name in seed.VARIANTS:
        values = seed.expected_values(REL_2512, QWEN, name)
        v = ladder.variant(name)
        assert v.summary.n == 5
        assert v.summary.median == pytest.approx(float(np.median(values)), rel=1e-12)
        assert (v.summary.ci_low, v.summary.ci_high) == pytest.approx(_log_t(values), rel=1e-12)
        if name == "Base":
            continue
        est, lo, hi, p = _welch(values, base)
        assert v.vs_baseline.ratio == pytest.approx(math.exp(est), rel=1e-12)
        assert (v.vs_baseline.ci_low, v.vs_baseline.ci_high) == pytest.approx(
            (math.exp(lo), math.exp(hi)), rel=1e-9
        )
        assert v.vs_baseline.p_value == pytest.approx(p, rel=1e-9)
        assert v.vs_baseline.q_value >= v.vs_baseline.p_value
    # Shares of the log gain add up to 1 and the steps multiply back to the total.
    steps = [ladder.variant(n).step.ratio for n in seed.VARIANTS[1:]]
    assert np.prod(steps) == pytest.approx(ladder.total.ratio, rel=1e-12)
    assert sum(ladder.variant(n).share for n in seed.VARIANTS[1:]) == pytest.approx(1.0)


def test_memory_ladder_is_oriented_lower_is_better(standard: Database) -> None:
    ladder = _build(standard).ladder_map("h200-2x8", MEM)[LLAMA]
    base = [seed.memory(LLAMA, "Base", r) for r in range(5)]
    last = [seed.memory(LLAMA, LAST, r) for r in range(5)]
    assert ladder.variant(LAST).vs_baseline.ratio == pytest.approx(math.exp(-_welch(last, base)[0]))
    assert ladder.variant(LAST).vs_baseline.ratio > 1.4


def test_release_over_release_verdicts_and_lookback(standard: Database) -> None:
    c = _build(standard)
    deltas = {(d.workload, d.variant): d for d in c.deltas if d.metric == TPUT}
    assert len(deltas) == 10 and all(d.status == "compared" for d in deltas.values())
    reg = deltas[(LLAMA, LAST)]
    old = seed.expected_values(REL_2511, LLAMA, LAST)
    new = seed.expected_values(REL_2512, LLAMA, LAST)
    est, lo, hi, p = _welch(new, old)
    # Without moderation the test is Welch's, recomputed here by hand.
    plain = _build(standard, options=replace(OPTS, moderated=False))
    (welch,) = [d for d in plain.deltas if d.metric == TPUT and (d.workload, d.variant) == (LLAMA, LAST)]
    assert welch.result is not None and welch.result.test == WELCH_LOG_TEST
    assert welch.result.change_pct == pytest.approx(math.expm1(est) * 100)
    assert welch.result.change_pct == pytest.approx(-8.0, abs=0.1)
    assert (welch.result.change_ci_low, welch.result.change_ci_high) == pytest.approx(
        (math.expm1(lo) * 100, math.expm1(hi) * 100), rel=1e-9
    )
    assert welch.result.p_value == pytest.approx(p) and p < 0.05
    # By default each side's variance is moderated toward its workload's rungs: same estimate.
    assert reg.result.test == MODERATED_LOG_TEST and c.method.test == MODERATED_LOG_TEST
    assert reg.result.change_pct == pytest.approx(welch.result.change_pct)
    assert reg.result.change_ci_low != welch.result.change_ci_low
    # The release is one Benjamini-Hochberg family: q is the adjusted p over every compared pair.
    from ablate.backend.analysis.stats import bh_adjust

    compared = [d.result for d in c.deltas if d.result is not None]
    assert [r.q_value for r in compared] == bh_adjust([r.p_value for r in compared])
    assert reg.result.q_value < 0.05 and reg.verdict == "regressed"
    assert deltas[(QWEN, "Base+ACCL")].verdict == "improved"
    assert deltas[(LLAMA, "Base")].verdict == "unchanged"
    assert [d.variant for d in c.regressions] == [LAST]
    suspects = sum(d.suspect for d in c.deltas if d.metric == TPUT)
    assert c.verdict_counts(TPUT) == {
        "regressed": 1,
        "suspect": suspects,  # past the threshold, not confirmed: counted apart, never as unchanged
        "improved": 1,
        "unchanged": 8 - suspects,
        "not testable": 0,
        "not compared": 0,
    }
    # Lookback: two earlier releases are fewer than the 4 it needs, so it does not speak.
    qb = deltas[(QWEN, "Base")]
    hist = [float(np.median(seed.expected_values(s, QWEN, "Base"))) for s in (REL_2510, REL_2511)]
    assert [p.median for p in qb.history] == pytest.approx(hist)
    assert qb.lookback.verdict is None
    assert qb.lookback.reasons == ("2 history releases: the lookback needs 4",)
    # With the minimum lowered it does: the prediction-interval t with K - 1 = 1 df.
    few = _build(standard, options=svc.ComparisonOptions(n_resamples=N, lookback_min_history=2))
    qb = next(d for d in few.deltas if (d.workload, d.variant, d.metric) == (QWEN, "Base", TPUT))
    new = float(np.median(seed.expected_values(REL_2512, QWEN, "Base")))
    t = (new - statistics.fmean(hist)) / (statistics.stdev(hist) * math.sqrt(1 + 1 / 2))
    assert qb.lookback.t == pytest.approx(t) and qb.lookback.critical == pytest.approx(stats.t.ppf(0.975, 1))
    assert few.method.lookback_min_history == 2


def test_manifest_diff_lists_suspects(standard: Database) -> None:
    c = _build(standard)
    diff = c.manifest_diff
    assert [x.name for x in diff.added] == ["accl"] and [x.name for x in diff.removed] == ["apex"]
    assert [(x.name, x.old, x.new) for x in diff.upgraded] == [
        ("flashinfer-python", "0.5.0", "0.5.3"),
        ("vllm", "0.11.0", "0.12.0"),
    ]
    assert "vllm 0.11.0 -> 0.12.0" in c.suspects
    assert c.to_json_dict()["suspects"] == list(c.suspects)


def test_explicit_baseline_and_first_release(standard: Database) -> None:
    c = _build(standard, baseline_ref=f"{seed.IMAGE}:25.10")
    assert c.baseline.ref == f"{seed.IMAGE}:25.10" and c.baseline_source == "explicit"
    first = _build(standard, f"{seed.IMAGE}:25.10")
    assert first.baseline is None and first.lookback_releases == ()
    assert all(d.status == "no baseline release" and d.result is None for d in first.deltas)
    assert any("no release-over-release" in m for m in first.missing)


def test_unknown_release_is_not_found(database: Database) -> None:
    with database.read() as s, pytest.raises(NotFound):
        svc.build_release_comparison(s, "nope:1.0")
    seed.seed_release(database, REL_2511)
    with database.read() as s, pytest.raises(NotFound):
        svc.build_release_comparison(s, REF.replace("25.12", "25.11"), baseline_ref="nope:1")


def test_partial_release_says_what_is_missing(database: Database) -> None:
    seed.seed_release(database, REL_2511)
    partial = ReleaseSpec(
        "25.12",
        {"vllm": "0.16.0"},
        skip={(w, "Base") for w in seed.WORKLOADS} | {(QWEN, "AC2+ACCL")},
        failed={(LLAMA, "Base+ACCL"): 2},
        repeats_of={(LLAMA, LAST): 1},
    )
    seed.seed_release(database, partial)
    c = _build(database)
    text = "\n".join(c.missing)
    assert "no succeeded Base runs" in text
    assert f"{LAST} on {LLAMA} (h200-2x8): one repeat only" in text
    assert f"Base+ACCL on {LLAMA} (h200-2x8): 2 of 7 runs did not succeed: run " in text
    # Each with its kind and the first line of its error, so the list says why.
    assert text.count("failed (infrastructure): NCCL timeout after 1800 s") == 2
    assert f"AC2+ACCL on {QWEN} (h200-2x8): no succeeded runs" in text
    ladder = c.ladder_map("h200-2x8", TPUT)[LLAMA]
    assert ladder.baseline == "Base" and ladder.baseline_missing and ladder.total is None
    cell = next(x for x in c.cells if (x.workload, x.variant) == (LLAMA, "Base+ACCL"))
    assert cell.succeeded == 5 and cell.failed == 2
    assert [f.error for f in cell.not_succeeded] == ["NCCL timeout after 1800 s"] * 2
    one = next(d for d in c.deltas if (d.workload, d.variant, d.metric) == (LLAMA, LAST, TPUT))
    assert one.result.p_value is None and one.verdict == "not testable"
    assert one in c.not_testable and c.verdict_counts(TPUT)["not testable"] == 1
    # Both metrics of that cell:
    assert "2 cell/metric pairs not testable (fewer than 2 repeats a side): no verdict" in c.missing
    dropped = next(d for d in c.deltas if (d.workload, d.variant, d.metric) == (QWEN, "AC2+ACCL", TPUT))
    assert dropped.status == "no data in this release"


def test_release_without_runs(database: Database) -> None:
    seed.seed_empty_release(database, "26.01", {"vllm": "0.16.0"})
    c = _build(database, f"{seed.IMAGE}:26.01")
    assert c.missing[0] == "no runs recorded for this release"
    assert c.ladders == () and c.deltas == () and c.metrics == ()


def test_row_order_does_not_matter(database: Database) -> None:
    forward = ReleaseSpec("1.0", {"a": "1"}, image="img-forward")
    backward = ReleaseSpec("1.0", {"a": "1"}, image="img-backward")
    seed.seed_release(database, forward)
    seed.seed_release(database, backward, reverse=True)
    a = _build(database, "img-forward:1.0").to_json_dict()
    b = _build(database, "img-backward:1.0").to_json_dict()
    for key in ("ladders", "deltas", "cells", "variants"):
        assert a[key] == b[key], key
    assert [m.replace("forward", "backward") for m in a["missing"]] == b["missing"]


def test_fixed_number_of_queries(database: Database) -> None:
    statements: list[str] = []
    event.listen(database.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    seed.seed_standard(database)
    statements.clear()
    _build(database, f"{seed.IMAGE}:25.10")
    small = len(statements)
    statements.clear()
    _build(database)
    # 25.10 has no earlier release, so no lookback query; 25.12 adds exactly that one. (The seeded
    # runs record image digests: one query reads what those images hold; one reads the versions the
    # cache keys builds by; the runs and their metrics are two statements.)
    assert len(statements) == small + 1 <= 11
    assert sum("run_metrics" in s for s in statements) == 2  # release + baseline, then the lookback
    statements.clear()
    _build(database)  # nothing written since: kept, and read with the versions, release and family only
    assert len(statements) == 3, statements
    assert not any("run_metrics" in s for s in statements)


def test_compare_two_sets_of_runs(standard: Database) -> None:
    c = _build(standard)
    old_ids = [
        r.run_id for r in c.runs if r.release.endswith("25.11") and (r.workload, r.variant) == (LLAMA, LAST)
    ]
    new_ids = [
        r.run_id for r in c.runs if r.release.endswith("25.12") and (r.workload, r.variant) == (LLAMA, LAST)
    ]
    with standard.read() as s:
        rs = svc.compare_run_sets(s, old_ids, new_ids, options=OPTS)
    d = next(d for d in rs.deltas if d.metric == TPUT)
    assert d.verdict == "regressed" and d.result.change_pct == pytest.approx(-8.0)
    assert (
        rs.baseline.releases == (f"{seed.IMAGE}:25.11",)
        and "vllm 0.11.0 -> 0.12.0" in rs.to_json_dict()["suspects"]
    )
    # One cell on each side: compared whatever the names (variant against variant).
    base_ids = [
        r.run_id for r in c.runs if r.release.endswith("25.12") and (r.workload, r.variant) == (LLAMA, "Base")
    ]
    with standard.read() as s:
        rs = svc.compare_run_sets(s, base_ids, new_ids, options=OPTS)
    d = next(d for d in rs.deltas if d.metric == TPUT)
    assert d.variant == f"{LAST} vs Base" and d.verdict == "improved"
    with standard.read() as s, pytest.raises(NotFound):
        svc.compare_run_sets(s, [10**9], new_ids)


def _rel(id_: int, tag: str, day: date | None = None) -> SimpleNamespace:
    return SimpleNamespace(id=id_, tag=tag, release_date=day)


def test_family_order_rules() -> None:
    by_version = svc.order_family([_rel(1, "25.12"), _rel(2, "25.9"), _rel(3, "26.01"), _rel(4, "25.10")])
    assert [r.tag for r in by_version] == ["25.9", "25.10", "25.12", "26.01"]
    # Not PEP 440: release dates decide when every release has one.
    dated = [_rel(1, "b-cu128", date(2025, 3, 1)), _rel(2, "a-cu130", date(2025, 4, 1))]
    assert [r.tag for r in svc.order_family(dated)] == ["b-cu128", "a-cu130"]
    natural = [_rel(1, "25.12-cu128"), _rel(2, "25.9-cu128")]
    assert [r.tag for r in svc.order_family(natural)] == ["25.9-cu128", "25.12-cu128"]


def test_noisy_cv_setting_reaches_the_analysis(standard: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    from ablate.backend.config import Settings

    values = seed.expected_values(REL_2512, QWEN, "Base")
    cv = float(np.std(values, ddof=1) / np.mean(values))
    assert 0.005 < cv < 0.05  # the seeded noise: about 0.8%
    lenient = _build(standard).ladder_map("h200-2x8", TPUT)[QWEN].variant("Base").summary
    assert not lenient.noisy and lenient.cv_upper < 0.05
    monkeypatch.setenv("ABLATE_NOISY_CV", "0.005")
    opts = svc.ComparisonOptions.from_settings(Settings(), n_resamples=N)
    assert opts.noisy_cv == 0.005
    c = _build(standard, options=opts)
    strict = c.ladder_map("h200-2x8", TPUT)[QWEN].variant("Base").summary
    assert strict.noisy and strict.reasons[0].startswith("cv about") and strict.reasons[0].endswith("> 0.5%")
    assert c.method.noisy_cv == 0.005


def test_a_reason_many_cells_share_is_said_once_with_its_count(database: Database) -> None:
    """The release page repeated the same reason in every cell's line; one line now counts them."""
    seed.seed_release(database, REL_2511)
    broken = ReleaseSpec(
        "25.12", {"vllm": "0.16.0"}, failed={(w, v): 2 for w in seed.WORKLOADS for v in ("Base", LAST)}
    )
    seed.seed_release(database, broken)
    c = _build(database)
    cells = 2 * len(seed.WORKLOADS)
    grouped = [
        m for m in c.missing if m.startswith(f"{2 * cells} runs failed (infrastructure): NCCL timeout")
    ]
    assert len(grouped) == 1, c.missing
    assert "\n".join(c.missing).count("NCCL timeout after 1800 s") == 1
    assert (
        f"Base on {LLAMA} (h200-2x8): 2 of 7 runs did not succeed: 2 for a reason listed above" in c.missing
    )
