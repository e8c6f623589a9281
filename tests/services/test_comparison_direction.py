"""A custom metric's stated direction reaches every verdict: "%" says nothing, "better" decides."""

from __future__ import annotations

import pytest

from ablate.backend.db.database import Database
from ablate.backend.schemas.results import ResultsBatch
from ablate.backend.services import comparison as svc
from ablate.backend.services import ingest

IMAGE = "training-direction-pytorch"


def _submit(database: Database, better: str, new: tuple[float, ...] = (60.0, 60.1, 60.2, 60.3, 60.4)) -> None:
    results = []
    releases = (("1.0", (50.0, 50.1, 50.2, 50.3, 50.4)), ("1.1", new))  # by default 20% higher
    for tag, levels in releases:
        for repeat, level in enumerate(levels):
            results.append(
                {
                    "release": {"image": IMAGE, "tag": tag, "platform": "gpu"},
                    "cluster": {"name": "c", "accelerator": "gpu", "devices_per_node": 8},
                    "workload": {"name": "w", "runner": "command"},
                    "variant": {"name": "Base", "position": 0},
                    "repeat": repeat,
                    "metrics": {
                        "throughput_tokens_per_s": 1000.0 + repeat,
                        "host_wait": {"value": level, "unit": "%", "better": better},
                    },
                }
            )
    with database.transaction() as s:
        ingest.submit_results(
            s, ResultsBatch.model_validate({"results": results}), token_scope="admin", idempotency_key=None
        )


@pytest.mark.parametrize(("better", "verdict"), [("lower", "regressed"), ("higher", "improved")])
def test_a_stated_direction_decides_the_verdict(database: Database, better: str, verdict: str) -> None:
    _submit(database, better)
    opts = svc.ComparisonOptions(metrics=("host_wait",), n_resamples=199)
    with database.read() as s:
        comparison = svc.build_release_comparison(s, f"{IMAGE}:1.1", options=opts)
    (delta,) = [d for d in comparison.deltas if d.metric == "host_wait"]
    assert comparison.baseline is not None and comparison.baseline.ref == f"{IMAGE}:1.0"
    assert delta.verdict == verdict, delta


def test_a_change_past_the_threshold_but_unconfirmed_is_counted_as_suspect(database: Database) -> None:
    """+5.6% at p = 0.036 whose q across the release's two comparisons is 0.072: suspect."""
    _submit(database, "lower", new=(50.4, 51.7, 53.0, 54.3, 55.6))
    opts = svc.ComparisonOptions(metrics=("host_wait", "throughput_tokens_per_s"), n_resamples=199)
    with database.read() as s:
        comparison = svc.build_release_comparison(s, f"{IMAGE}:1.1", options=opts)
    (delta,) = [d for d in comparison.deltas if d.metric == "host_wait"]
    r = delta.result
    assert delta.verdict == "unchanged" and r is not None and r.indicated == "regressed"
    assert r.p_value is not None and r.p_value < 0.05 <= (r.q_value or 0.0)
    assert delta.suspect and comparison.verdict_counts("host_wait")["suspect"] == 1
    assert comparison.verdict_counts("host_wait")["unchanged"] == 0


def test_a_change_past_the_threshold_within_the_noise_is_unchanged_not_suspect(database: Database) -> None:
    _submit(database, "lower", new=(48.0, 56.0, 51.0, 58.0, 50.0))  # +5% on the median, p = 0.2
    opts = svc.ComparisonOptions(metrics=("host_wait",), n_resamples=199)
    with database.read() as s:
        comparison = svc.build_release_comparison(s, f"{IMAGE}:1.1", options=opts)
    (delta,) = [d for d in comparison.deltas if d.metric == "host_wait"]
    assert delta.verdict == "unchanged" and not delta.suspect
    assert delta.result is not None and any("within the noise" in x for x in delta.result.reasons)
    assert comparison.verdict_counts("host_wait")["unchanged"] == 1
