import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ablate.backend.analysis.factorial import ZERO_VARIANCE_NOTE, analyze_factorial, factors_from_variant

from .helpers import assert_no_nan

NOISE = [0.98, 1.0, 1.03]


def cells_2x2(a=1.2, b=1.5, ab=1.0, base=100.0):
    return [
        ("Base", [base * n for n in NOISE]),
        ("A", [base * a * n for n in NOISE]),
        ("B", [base * b * n for n in NOISE]),
        ("A+B", [base * a * b * ab * n for n in NOISE]),
    ]


def test_factors_from_variant():
    assert factors_from_variant("Base") == frozenset()
    assert factors_from_variant("Base+ACCL") == {"ACCL"}
    assert factors_from_variant("AC2+ACCL+CompilerOpt+CkptOpt") == {"AC2", "ACCL", "CompilerOpt", "CkptOpt"}


def test_multiplicative_model_recovered_exactly():
    r = analyze_factorial(cells_2x2(a=1.2, b=1.5, ab=1.1), "throughput_tokens_per_s")
    assert r.complete and r.factors == ("A", "B") and r.df == 8
    eff = {e.factors: e for e in (*r.main_effects, *r.interactions)}
    # A: mean of log with A on minus off; B's multiplier cancels, half the interaction remains.
    assert eff[("A",)].factor == pytest.approx(1.2 * math.sqrt(1.1))
    assert eff[("B",)].factor == pytest.approx(1.5 * math.sqrt(1.1))
    # Full size: A gains 10% more with B on than off (Yates' convention would print sqrt(1.1)).
    assert eff[("A", "B")].factor == pytest.approx(1.1)


def _welch(weights, y):
    """(se, Satterthwaite df) of sum w_i mean_i with each cell's own variance."""
    parts = [w * w * v.var(ddof=1) / v.size for w, v in zip(weights, y, strict=True)]
    df = sum(parts) ** 2 / sum(p * p / (v.size - 1) for p, v in zip(parts, y, strict=True))
    return math.sqrt(sum(parts)), df


def test_effects_and_welch_intervals_recomputed_by_hand():
    cells = [
        ("Base", [100.0, 103.0, 98.0]),
        ("A", [118.0, 121.0, 119.5, 120.2, 118.8]),
        ("B", [131.0, 128.0, 135.0]),
        ("A+B", [160.0, 158.0, 166.0, 161.0]),
    ]
    r = analyze_factorial(cells, "throughput_tokens_per_s", confidence=0.9)
    y = [np.log(v) for _, v in cells]
    m = dict(zip(["Base", "A", "B", "A+B"], (v.mean() for v in y), strict=True))
    a = ((m["A"] + m["A+B"]) - (m["Base"] + m["B"])) / 2
    ab = (m["A+B"] - m["B"]) - (m["A"] - m["Base"])  # full size
    se_a, df_a = _welch([-0.5, 0.5, -0.5, 0.5], y)
    se_ab, df_ab = _welch([1.0, -1.0, -1.0, 1.0], y)
    ea, eab = r.main_effects[0], r.interactions[0]
    assert ea.log_effect == pytest.approx(a) and eab.log_effect == pytest.approx(ab)
    assert (ea.se, ea.df, eab.se, eab.df) == pytest.approx((se_a, df_a, se_ab, df_ab))
    t = stats.t.ppf(0.95, df_a)
    assert (ea.ci_low, ea.ci_high) == pytest.approx((math.exp(a - t * se_a), math.exp(a + t * se_a)))
    assert ea.p_value == pytest.approx(2 * stats.t.sf(abs(a) / se_a, df_a))
    assert ea.method.startswith("t-interval, welch-satterthwaite")
    assert_no_nan(r)


def test_a_cell_with_one_run_falls_back_to_the_pooled_variance():
    cells = [(k, v if k != "B" else v[:1]) for k, v in cells_2x2()]
    r = analyze_factorial(cells, "throughput_tokens_per_s")
    e = r.main_effects[0]
    assert e.method.startswith("t-interval, pooled") and e.df == r.df == 6 and e.ci_low is not None


def test_lower_is_better_orientation():
    cells = [("Base", [1.0, 1.01]), ("Fast", [0.5, 0.505]), ("Big", [1.0, 1.01]), ("Fast+Big", [0.5, 0.505])]
    r = analyze_factorial(cells, "step_time_s")
    eff = {e.factors[0]: e for e in r.main_effects}
    assert eff["Fast"].factor == pytest.approx(2.0)
    assert eff["Big"].factor == pytest.approx(1.0)


def test_default_ladder_is_not_full_factorial():
    ladder = ["Base", "Base+ACCL", "AC2+ACCL", "AC2+ACCL+CompilerOpt", "AC2+ACCL+CompilerOpt+CkptOpt"]
    r = analyze_factorial([(n, [1.0, 1.1]) for n in ladder], "throughput_tokens_per_s")
    assert not r.complete and r.main_effects == () and r.interactions == ()
    assert len(r.missing) == 16 - 5
    assert ("AC2",) in r.missing and ("CkptOpt",) in r.missing
    assert r.missing == tuple(sorted(r.missing, key=lambda t: (len(t), t)))
    assert "not full-factorial" in r.reasons[0]


def test_cell_without_values_counts_as_missing():
    cells = cells_2x2()
    cells[1] = ("A", [])
    r = analyze_factorial(cells, "throughput_tokens_per_s")
    assert not r.complete and r.missing == (("A",),)


def test_single_replicate_has_no_interval():
    cells = [(k, v[:1]) for k, v in cells_2x2()]
    r = analyze_factorial(cells, "throughput_tokens_per_s")
    assert r.complete and r.df == 0
    assert all(e.ci_low is None and e.p_value is None for e in r.main_effects)
    assert r.main_effects[0].factor == pytest.approx(1.2)
    assert_no_nan(r)


def test_factor_list_and_validation():
    r = analyze_factorial(
        [(frozenset(), [1.0]), ({"X"}, [2.0])], "throughput_tokens_per_s", factors=["X", "Y"]
    )
    assert not r.complete and r.missing == (("Y",), ("X", "Y"))
    with pytest.raises(ValueError):
        analyze_factorial([("Base+Z", [1.0])], "throughput_tokens_per_s", factors=["X"])
    assert analyze_factorial([], "throughput_tokens_per_s").reasons == ("no factors",)


def test_three_factors_interactions_count():
    rng = np.random.default_rng(1)
    cells = []
    for a in (0, 1):
        for b in (0, 1):
            for c in (0, 1):
                on = [f for f, x in zip("ABC", (a, b, c), strict=True) if x]
                mult = 1.1**a * 1.2**b * 0.9**c
                cells.append((set(on), list(100 * mult * rng.uniform(0.99, 1.01, 3))))
    r = analyze_factorial(cells, "throughput_tokens_per_s")
    assert len(r.main_effects) == 3 and len(r.interactions) == 3
    eff = {e.factors: e.factor for e in r.main_effects}
    assert eff[("A",)] == pytest.approx(1.1, rel=0.02)
    assert eff[("C",)] == pytest.approx(0.9, rel=0.02)
    assert all(e.factor == pytest.approx(1.0, abs=0.02) for e in r.interactions)


@settings(max_examples=50, deadline=None)
@given(
    vals=st.lists(st.lists(st.floats(1.0, 1e4), min_size=1, max_size=4), min_size=4, max_size=4),
    k=st.floats(1e-2, 1e2),
    data=st.data(),
)
def test_order_and_scale_invariant(vals, k, data):
    keys = ["Base", "A", "B", "A+B"]
    a = analyze_factorial(list(zip(keys, vals, strict=True)), "throughput_tokens_per_s")
    shuffled = data.draw(st.permutations(list(zip(keys, [[x * k for x in v] for v in vals], strict=True))))
    b = analyze_factorial(
        [(key, data.draw(st.permutations(v))) for key, v in shuffled], "throughput_tokens_per_s"
    )
    for ea, eb in zip(a.main_effects + a.interactions, b.main_effects + b.interactions, strict=True):
        assert ea.factors == eb.factors
        assert eb.factor == pytest.approx(ea.factor, rel=1e-6)


# Finding the design among variants ----------------------------------------------------------------


def test_demo_study_is_a_two_by_two():
    from pathlib import Path

    import yaml

    from ablate.backend.analysis.factorial import find_factorial_design

    plan = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "examples/plans/cpu-factorial-tiny.yaml").read_text()
    )
    design = find_factorial_design([(v["name"], v["factors"]) for v in plan["variants"]])
    assert design is not None and design.factors == ("ckpt_opt", "compiler_opt")
    assert design.label == "2x2 factorial (ckpt_opt x compiler_opt)"
    assert dict(design.cells)["+CompilerOpt+CkptOpt"] == ("ckpt_opt", "compiler_opt")


def test_ladder_and_incomplete_designs_are_not_factorial():
    from ablate.backend.analysis.factorial import find_factorial_design

    ladder = [
        ("Base", []),
        ("Base+ACCL", ["accl"]),
        ("AC2+ACCL", ["ac2", "accl"]),
        ("AC2+ACCL+CompilerOpt", ["ac2", "accl", "compiler_opt"]),
        ("AC2+ACCL+CompilerOpt+CkptOpt", ["ac2", "accl", "ckpt_opt", "compiler_opt"]),
    ]
    assert find_factorial_design(ladder) is None
    assert find_factorial_design([("Base", []), ("A", ["a"]), ("B", ["b"])]) is None
    # Two variants with the same factors are ambiguous as a cell.
    dup = [("Base", []), ("A", ["a"]), ("B", ["b"]), ("AB", ["a", "b"]), ("AB2", ["b", "a"])]
    assert find_factorial_design(dup) is None


def test_design_with_background_and_largest_set_wins():
    import itertools

    from ablate.backend.analysis.factorial import find_factorial_design

    # a 2x2 over {x, y} on top of an always-on "os", plus a stray ladder rung
    variants = [("os", ["os"]), ("os+x", ["os", "x"]), ("os+y", ["os", "y"]), ("os+x+y", ["os", "x", "y"])]
    d = find_factorial_design([("Base", []), *variants, ("all", ["os", "x", "y", "z"])])
    assert d.factors == ("x", "y") and d.background == ("os",) and d.cells[0] == ("os", ())
    cube = [("v" + "".join(s), list(s)) for r in range(4) for s in itertools.combinations("abc", r)]
    d = find_factorial_design(cube)
    assert d.factors == ("a", "b", "c") and len(d.cells) == 8
    # input order does not matter
    assert find_factorial_design(list(reversed(cube))) == d


def test_a_deterministic_design_names_zero_variance_never_a_tiny_p() -> None:
    """Equal repeats per cell (memory): the rounding of a mean of equal logs is no variance (issue 27:
    46% of such designs showed p ~ 1e-30)."""
    rng = np.random.default_rng(27)
    for _ in range(200):
        level = float(rng.uniform(10.0, 80.0))
        mus = {(): level, ("A",): level * 0.8, ("B",): level * 1.1, ("A", "B"): level * 0.85}
        n = int(rng.integers(2, 6))
        fa = analyze_factorial([(list(k), [v] * n) for k, v in mus.items()], "peak_memory_gib")
        assert ZERO_VARIANCE_NOTE in fa.reasons
        for e in (*fa.main_effects, *fa.interactions):
            assert e.p_value is None and e.ci_low is None and e.se == 0.0
