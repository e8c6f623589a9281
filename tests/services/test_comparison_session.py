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
