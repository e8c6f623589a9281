"""Values at both ends of the accepted range (1e-300 beside 1e15, issue 30): ratios of 1e315 and their
logs past exp's range. Every page, the comparison API, the history API and every report format answer
200 with finite numbers; what cannot be shown as a float is shown clamped and said so."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

import httpx

from tests.api.helpers import REF, create_release, result
from tests.support.live_server import LiveServer

NEW = "training-nv-pytorch:26.01"
TINY, HUGE = 1e-300, 1e15
BASE = {"name": "Base", "factors": []}
OPT = {"name": "Base+CompilerOpt", "factors": ["compiler_opt"]}


def _metrics(speed: float, step: float, memory: float) -> dict[str, Any]:
    return {"throughput_tokens_per_s": speed, "step_time_s": step, "peak_memory_gib": memory}


def _seed(admin: httpx.Client, ci: httpx.Client) -> list[int]:
    """REF at the bottom of the range, NEW at the top with a ladder from the bottom to the top."""
    create_release(admin)
    create_release(admin, tag="26.01")
    batch = []
    for i in range(3):
        bump = 1.0 + i * 1e-3
        batch.append(
            result(release=REF, variant=BASE, repeat=i, metrics=_metrics(TINY * bump, HUGE / bump, TINY))
        )
        batch.append(result(release=REF, variant=OPT, repeat=i, metrics=_metrics(TINY * bump, HUGE, HUGE)))
        batch.append(result(release=NEW, variant=BASE, repeat=i, metrics=_metrics(TINY * bump, HUGE, TINY)))
        batch.append(result(release=NEW, variant=OPT, repeat=i, metrics=_metrics(HUGE / bump, TINY, HUGE)))
    # One cell spread over the whole range: its interval and noise bound are past exp's range too.
    spread = [TINY, HUGE, 1.0]
    for i, v in enumerate(spread):
        batch.append(
            result(
                release=NEW,
                variant={"name": "Spread", "factors": ["accl"]},
                repeat=i,
                metrics=_metrics(v, v, v),
            )
        )
    response = ci.post("/results", json={"results": batch})
    assert response.status_code == 201, response.text
    return list(response.json()["run_ids"])


def _finite(text: str) -> None:
    """Strict JSON: no NaN or Infinity anywhere."""

    def refuse(token: str) -> None:
        raise AssertionError(f"non-finite {token} in {text[:200]}")

    json.loads(text, parse_constant=refuse)


def test_the_ends_of_the_accepted_range_keep_every_page_and_format_answering(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client
) -> None:
    run_ids = _seed(admin, ci)
    old, new = quote(REF, safe=":"), quote(NEW, safe=":")
    half = len(run_ids) // 2
    a_runs, b_runs = ",".join(map(str, run_ids[:half])), ",".join(map(str, run_ids[half:]))
    pages = [
        "/",
        "/releases",
        f"/releases/{old}",
        f"/releases/{new}",
        f"/releases/{new}?baseline={old}",
        f"/compare?a={old}&b={new}",
        f"/compare?a={new}&b={old}",
        f"/compare?baseline_runs={a_runs}&contender_runs={b_runs}",
        "/runs",
        f"/runs/{run_ids[-1]}",
    ]
    with httpx.Client(base_url=live_server.url, timeout=60) as web:
        for path in pages:
            response = web.get(path)
            assert response.status_code == 200, (path, response.status_code, response.text[-2000:])
            assert "Traceback" not in response.text, path
    api = [
        f"/releases/{new}/comparison",
        f"/releases/{old}/comparison",
        f"/compare?baseline={old}&contender={new}",
        f"/compare?baseline={new}&contender={old}",
        f"/compare?baseline_runs={a_runs}&contender_runs={b_runs}",
    ]
    for cell in ("Base", "Base+CompilerOpt", "Spread"):
        for metric in ("throughput_tokens_per_s", "step_time_s", "peak_memory_gib"):
            query = {
                "image": "training-nv-pytorch",
                "cluster": "h200-2x8",
                "workload": "deepspeed/llama3-8b",
                "variant": cell,
                "metric": metric,
            }
            api.append("/history?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items()))
    for path in api:
        response = ci.get(path)
        assert response.status_code == 200, (path, response.status_code, response.text[-2000:])
        _finite(response.text)
    # The ratio 1e15 / 1e-300 is shown clamped at 1e300, and said so; its log is exact.
    ladder = ci.get(f"/releases/{new}/comparison").text
    assert "shown clamped" in ladder
    markdown = ci.get(f"/releases/{new}/report?format=md").text
    assert "| 1e+300\u00d7 |" in markdown and "shown clamped" in markdown
    for ref in (new, old):
        for fmt in ("html", "md", "csv", "json"):
            response = ci.get(f"/releases/{ref}/report?format={fmt}")
            assert response.status_code == 200, (ref, fmt, response.status_code, response.text[-2000:])
            if fmt == "json":
                _finite(response.text)
            elif fmt in ("md", "csv"):
                assert not re.search(r"\b(nan|inf|infinity)\b", response.text, re.IGNORECASE), (ref, fmt)
