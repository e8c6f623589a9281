"""The release comparison counts the noise between sessions, estimated from the earlier releases."""

from __future__ import annotations

import numpy as np

from ablate.backend.db.database import Database
from ablate.backend.schemas.results import ResultsBatch
from ablate.backend.services import comparison as svc
from ablate.backend.services import ingest

IMAGE = "training-session-pytorch"
TPUT = "throughput_tokens_per_s"
VARIANTS = ("Base", "Base+ACCL", "AC2+ACCL", "AC2+ACCL+CompilerOpt")


def _submit(database: Database, tags: list[str], shifts: np.ndarray, rng: np.random.Generator) -> None:
    """Each release is one session: every cell moves by its own shift (shifts[release, cell])."""
    results = []
    for r, tag in enumerate(tags):
        for v, variant in enumerate(VARIANTS):
            for repeat in range(4):
                value = 1000.0 * (1 + 0.1 * v) * shifts[r, v] * float(np.exp(0.005 * rng.standard_normal()))
                results.append(
                    {
                        "release": {"image": IMAGE, "tag": tag, "platform": "gpu"},
                        "cluster": {"name": "c", "accelerator": "gpu", "devices_per_node": 8},
                        "workload": {"name": "w", "runner": "command"},
                        "variant": {"name": variant, "position": v},
                        "repeat": repeat,
                        "metrics": {TPUT: value},
                    }
                )
    with database.transaction() as s:
        ingest.submit_results(
            s, ResultsBatch.model_validate({"results": results}), token_scope="admin", idempotency_key=None
        )


def _deltas(database: Database, ref: str) -> list[svc.ReleaseDelta]:
    opts = svc.ComparisonOptions(metrics=(TPUT,), n_resamples=99)
    with database.read() as s:
        comparison = svc.build_release_comparison(s, ref, options=opts)
    return [d for d in comparison.deltas if d.result is not None]


def test_session_noise_from_earlier_releases_widens_the_verdicts(database: Database) -> None:
    """Sessions 3% apart and repeats 0.5% apart: without the session term a 3% session shift of the
    last release would read "regressed"; with it the verdict is unchanged and the reason names tau."""
    rng = np.random.default_rng(7)
    tags = ["1.0", "1.1", "1.2", "1.3", "1.4"]
    shifts = np.exp(0.03 * rng.standard_normal((len(tags) - 1, len(VARIANTS))))
    # 1.4: Base's session 4% slower than in 1.3, the other cells as they were.
    shifts = np.vstack([shifts, shifts[-1] * np.array([0.96, 1.0, 1.0, 1.0])])
    _submit(database, tags, shifts, rng)
    deltas = _deltas(database, f"{IMAGE}:1.4")
    assert len(deltas) == len(VARIANTS)
    for d in deltas:
        assert d.result is not None and d.result.session_var > 0
        note = next(x for x in d.result.reasons if x.startswith("between-session variance added: tau "))
        # 1.0-1.3 are the earlier sessions: 3 differences in each of the 4 cells.
        assert note.endswith("% (12 release-to-release differences of 4 cells on c)"), note
        # Four earlier releases and this one: the drift test speaks, one family with the others.
        assert d.trend is not None and d.trend.n_releases == 5 and d.trend.q_value is not None
    base = next(d for d in deltas if d.variant == "Base")
    assert base.result is not None and base.verdict == "unchanged"
    assert base.result.improvement_pct is not None and base.result.improvement_pct < -3


def test_without_enough_history_the_session_noise_is_unknown_and_said(database: Database) -> None:
    rng = np.random.default_rng(8)
    _submit(database, ["1.0", "1.1"], np.ones((2, len(VARIANTS))), rng)
    opts = svc.ComparisonOptions(metrics=(TPUT,), n_resamples=99)
    with database.read() as s:
        comparison = svc.build_release_comparison(s, f"{IMAGE}:1.1", options=opts)
    d = comparison.deltas[0]
    assert d.result is not None and d.result.session_var == 0.0
    assert not any("between-session" in x for x in d.result.reasons)
    assert any(
        m.startswith("between-session variance unknown on c (0 release-to-release differences, 3 needed")
        for m in comparison.missing
    )


def test_a_slow_drift_is_tested_against_the_release_k_back(database: Database) -> None:
    """2.5% slower per release: each step stays under the 3% threshold (unchanged), the release five
    back is 12% faster (regressed), and the lookback's cell says so."""
    from ablate.backend.dashboard.views.deltas import delta_row
    from ablate.backend.domain.formatting import pct
    from ablate.backend.reports.tables import lookback_text

    rng = np.random.default_rng(9)
    tags = ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5"]
    shifts = np.array(
        [[0.975**r * float(np.exp(0.002 * rng.standard_normal())) for _ in VARIANTS] for r in range(6)]
    )
    _submit(database, tags, shifts, rng)
    deltas = _deltas(database, f"{IMAGE}:1.5")
    assert len(deltas) == len(VARIANTS)
    for d in deltas:
        assert d.verdict == "unchanged" and d.k_back is not None and d.k_back_release == f"{IMAGE}:1.0"
        assert d.k_back.n_baseline == 4 and d.k_back.session_var > 0
        assert d.k_back.verdict == "regressed" and d.k_back.improvement_pct is not None
        assert -14 < d.k_back.improvement_pct < -10
        shown = f"; vs {IMAGE}:1.0 (5 back) {pct(d.k_back.improvement_pct)} (regressed)"
        assert lookback_text(d).endswith(shown)
        row = delta_row(d)
        assert row.lookback is not None and f"vs {IMAGE}:1.0 (5 back): " in row.lookback
    # Too little history (3 earlier releases): no test against a release K back.
    (short,) = [d for d in _deltas(database, f"{IMAGE}:1.3") if d.variant == "Base"]
    assert short.k_back is None and short.k_back_release is None
