"""A 2x2 factorial release through the real ingest path (both databases): effects recomputed with numpy."""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pytest
from scipy import stats

from ablate.backend.db.database import Database
from ablate.backend.domain.formatting import ratio
from ablate.backend.reports import FORMATS, render
from ablate.backend.schemas.results import ResultsBatch
from ablate.backend.services import comparison as svc
from ablate.backend.services.ingest import submit_results
from tests.reports import seed

IMAGE = "ablate-demo"
REF = f"{IMAGE}:0.1"
TPUT, MEM = "throughput_tokens_per_s", "peak_memory_gib"
WORKLOADS = {"torch-llm-tiny": 1000.0, "torch-llm-small": 400.0}
# name, position, factors: the demo study examples/plans/cpu-factorial-tiny.yaml
VARIANTS = (
    ("Base", 1, []),
    ("+CompilerOpt", 2, ["compiler_opt"]),
    ("+CkptOpt", 3, ["ckpt_opt"]),
    ("+CompilerOpt+CkptOpt", 4, ["ckpt_opt", "compiler_opt"]),
)
COMPILE, CKPT, BOTH = 1.30, 0.85, 1.04  # multipliers: compile helps, checkpointing costs, synergy
NOISE = (0.99, 1.0, 1.013)


def throughput(workload: str, factors: list[str], repeat: int) -> float:
    mult = (COMPILE if "compiler_opt" in factors else 1.0) * (CKPT if "ckpt_opt" in factors else 1.0)
    if len(factors) == 2:
        mult *= BOTH
    return WORKLOADS[workload] * mult * NOISE[(repeat + len(factors)) % 3]


def memory(factors: list[str], repeat: int) -> float:
    return (
        (30.0 if "ckpt_opt" in factors else 50.0) - (2.0 if "compiler_opt" in factors else 0.0) + 0.1 * repeat
    )


def _seed(database: Database) -> None:
    results = [
        {
            "release": {"image": IMAGE, "tag": "0.1", "platform": "gpu", "manifest": {"torch": "2.8.0"}},
            "cluster": {"name": "cpu-local", "accelerator": "cpu", "nodes": 1, "devices_per_node": 1},
            "workload": {"name": workload},
            "variant": {"name": name, "position": position, "factors": factors},
            "repeat": r,
            "metrics": {TPUT: throughput(workload, factors, r), MEM: memory(factors, r)},
        }
        for workload in WORKLOADS
        for name, position, factors in VARIANTS
        for r in range(3)
    ]
    with database.transaction() as session:
        batch = ResultsBatch.model_validate({"results": results})
        submit_results(session, batch, token_scope="admin", idempotency_key=None)


def _build(database: Database, ref: str = REF) -> svc.ReleaseComparison:
    with database.read() as s:
        return svc.build_release_comparison(s, ref, options=svc.ComparisonOptions(n_resamples=199))


@pytest.fixture
def factorial(database: Database) -> Database:
    _seed(database)
    return database


def test_two_by_two_is_detected_from_the_variant_factors(factorial: Database) -> None:
    c = _build(factorial)
    d = c.factorial_design
    assert d is not None and d.factors == ("ckpt_opt", "compiler_opt") and d.background == ()
    assert dict(d.cells) == {
        "Base": (),
        "+CkptOpt": ("ckpt_opt",),
        "+CompilerOpt": ("compiler_opt",),
        "+CompilerOpt+CkptOpt": ("ckpt_opt", "compiler_opt"),
    }
    assert c.factorial_note == "2x2 factorial (ckpt_opt x compiler_opt)"
    assert [(e.cluster, e.workload, e.metric) for e in c.factorials] == [
        ("cpu-local", w, m) for m in (TPUT, MEM) for w in sorted(WORKLOADS)
    ]


@pytest.mark.parametrize("metric", [TPUT, MEM])
def test_main_effects_and_interaction_recomputed_with_numpy(factorial: Database, metric: str) -> None:
    c = _build(factorial)
    sign = 1.0 if metric == TPUT else -1.0  # memory: lower is better, so effects use -log
    for workload in WORKLOADS:
        fa = c.factorial_map("cpu-local", metric)[workload]
        assert fa.complete and fa.n_values == 12 and fa.df == 8
        logs = {}
        for _name, _pos, factors in VARIANTS:
            vals = [
                throughput(workload, factors, r) if metric == TPUT else memory(factors, r) for r in range(3)
            ]
            logs[frozenset(factors)] = sign * np.log(np.array(vals))
        m = {k: v.mean() for k, v in logs.items()}  # log of each cell's geometric mean
        o, a, b, ab = (
            frozenset(),
            frozenset({"compiler_opt"}),
            frozenset({"ckpt_opt"}),
            frozenset({"compiler_opt", "ckpt_opt"}),
        )
        compile_effect = ((m[a] + m[ab]) - (m[o] + m[b])) / 2
        ckpt_effect = ((m[b] + m[ab]) - (m[o] + m[a])) / 2
        interaction = (m[ab] - m[b]) - (m[a] - m[o])  # full size: compile's gain with ckpt on minus off
        eff = {e.factors: e for e in (*fa.main_effects, *fa.interactions)}
        assert eff[("compiler_opt",)].factor == pytest.approx(math.exp(compile_effect), rel=1e-12)
        assert eff[("ckpt_opt",)].factor == pytest.approx(math.exp(ckpt_effect), rel=1e-12)
        assert eff[("ckpt_opt", "compiler_opt")].factor == pytest.approx(math.exp(interaction), rel=1e-12)
        # t interval with the Welch-Satterthwaite standard error of the contrast (weights +-1/2)
        parts = [0.25 * v.var(ddof=1) / v.size for v in logs.values()]
        se = math.sqrt(sum(parts))
        df = sum(parts) ** 2 / sum(p * p / 2 for p in parts)
        t = stats.t.ppf(0.975, df)
        e = eff[("compiler_opt",)]
        assert e.se == pytest.approx(se, rel=1e-9) and e.df == pytest.approx(df, rel=1e-9)
        assert (e.ci_low, e.ci_high) == pytest.approx(
            (math.exp(compile_effect - t * se), math.exp(compile_effect + t * se)), rel=1e-9
        )
        assert e.p_value == pytest.approx(2 * stats.t.sf(abs(compile_effect) / se, df), rel=1e-9)
    if metric == TPUT:
        tiny = {e.factors: e for e in c.factorial_map("cpu-local", TPUT)["torch-llm-tiny"].main_effects}
        assert tiny[("compiler_opt",)].factor > 1.2 and tiny[("ckpt_opt",)].factor < 0.95


def test_reports_show_the_factorial_section(factorial: Database) -> None:
    c = _build(factorial)
    md = render(c, "md")
    assert "## Factorial effects" in md and "Factorial effects: Throughput on cpu-local" in md
    assert "read the Factorial effects section" in md  # the ladder table says where to look
    row = next(line for line in md.splitlines() if line.startswith("| torch-llm-tiny | compiler_opt |"))
    fa = c.factorial_map("cpu-local", TPUT)["torch-llm-tiny"]
    assert f"| {ratio(fa.main_effects[1].factor)} |" in row and "| main effect |" in row and "| 12 |" in row
    html = render(c, "html")
    assert 'id="factorial-effects"' in html and 'href="#factorial-effects"' in html
    # The effects chart with intervals instead of a waterfall, which would credit positions.
    assert 'id="c0-factorial"' in html and "-waterfall" not in html
    rows = [r for r in csv.DictReader(io.StringIO(render(c, "csv"))) if r["section"] == "factorial_effect"]
    assert len(rows) == 2 * 2 * 3  # workloads x metrics x (2 main effects + 1 interaction)
    got = {(r["workload"], r["metric"], r["variant"], r["effect"]): float(r["speedup"]) for r in rows}
    assert got[("torch-llm-tiny", TPUT, "compiler_opt", "main")] == fa.main_effects[1].factor
    assert ("torch-llm-tiny", MEM, "ckpt_opt x compiler_opt", "interaction") in got
    body = json.loads(render(c, "json"))
    assert body["factorial_design"]["factors"] == ["ckpt_opt", "compiler_opt"]
    assert body["factorial_note"] == "2x2 factorial (ckpt_opt x compiler_opt)"
    assert len(body["factorials"]) == 4
    again = _build(factorial)
    for fmt in FORMATS:
        assert render(again, fmt) == render(c, fmt), fmt


def test_a_ladder_is_not_a_factorial(database: Database) -> None:
    seed.seed_standard(database)
    c = _build(database, f"{seed.IMAGE}:25.12")
    assert c.factorial_design is None and c.factorials == ()
    assert c.factorial_note == "not a factorial design"
    assert json.loads(render(c, "json"))["factorial_note"] == "not a factorial design"
    assert "Factorial effects" not in render(c, "md") and "factorial-effects" not in render(c, "html")
    assert not any(r.startswith("factorial_effect,") for r in render(c, "csv").splitlines())


def test_missing_combination_says_so_in_the_analysis(database: Database) -> None:
    """The variants are a factorial, but one cell of one workload never succeeded."""
    _seed(database)
    with database.transaction() as session:
        results = [
            {
                "release": {"image": IMAGE, "tag": "0.2", "platform": "gpu"},
                "cluster": {"name": "cpu-local", "accelerator": "cpu", "nodes": 1, "devices_per_node": 1},
                "workload": {"name": "torch-llm-tiny"},
                "variant": {"name": name, "position": position, "factors": factors},
                "repeat": r,
                "metrics": {TPUT: throughput("torch-llm-tiny", factors, r)},
            }
            for name, position, factors in VARIANTS[:3]
            for r in range(3)
        ] + [
            {
                "release": {"image": IMAGE, "tag": "0.2", "platform": "gpu"},
                "cluster": {"name": "cpu-local", "accelerator": "cpu", "nodes": 1, "devices_per_node": 1},
                "workload": {"name": "torch-llm-tiny"},
                "variant": {"name": VARIANTS[3][0], "position": 4, "factors": VARIANTS[3][2]},
                "repeat": 0,
                "status": "failed",
                "error": "OOM",
            }
        ]
        submit_results(
            session,
            ResultsBatch.model_validate({"results": results}),
            token_scope="admin",
            idempotency_key=None,
        )
    c = _build(database, f"{IMAGE}:0.2")
    assert c.factorial_design is not None
    fa = c.factorial_map("cpu-local", TPUT)["torch-llm-tiny"]
    assert not fa.complete and fa.main_effects == () and fa.missing == (("ckpt_opt", "compiler_opt"),)
    assert "not full-factorial" in render(c, "md")
