"""In Chromium, on both databases: names written as HTML reach the charts as literal text.

plotly draws a subset of HTML in every text (``<a href>`` becomes a live SVG link, ``<b>`` a bold
tspan). A release, workload, variant and cluster named with markup must show that markup as
characters on the release page and in the self-contained report, with no link and nothing bold.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.support.databases import DatabaseFactory
from tests.support.live_server import LiveServer, start_live_server
from tests.web import seed
from tests.web.conftest import Console
from tests.web.helpers import assert_no_console_errors, open_page

pytestmark = pytest.mark.browser

EVIL = '<a href="https://evil.example">x</a><b>B</b>'
VARIANT = f"Base+{EVIL}"
WORKLOAD = f"w-{EVIL}"
CLUSTER = f"c-{EVIL}"
# A tag holds no whitespace, ':' or '/', so no closing tag: an unclosed <b> would still embolden.
TAG = "25.12<b>B<i>x"
REF = f"evil-img:{TAG}"

# Per chart: its SVG links, its bold or italic tspans, and all the text it draws.
SVG_STATE_JS = """
() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(plot => ({
  id: plot.id,
  links: plot.querySelectorAll('svg a').length,
  styled: Array.from(plot.querySelectorAll('svg tspan')).filter(t => {
    const style = t.getAttribute('style') || '';
    return /font-weight:\\s*bold|font-style:\\s*italic/.test(style);
  }).length,
  text: Array.from(plot.querySelectorAll('svg text')).map(t => t.textContent).join('\\n'),
}))
"""


def _seed(server: LiveServer) -> None:
    admin = {"Authorization": f"Bearer {seed.make_token(server.database, 'evil-admin', 'admin')}"}
    ci = {"Authorization": f"Bearer {seed.make_token(server.database, 'evil-ci', 'submit')}"}
    release = {
        "image": "evil-img",
        "tag": TAG,
        "platform": "gpu",
        "release_date": "2026-01-01",
        "manifest": {"torch": "2.9.0"},
    }
    cluster = {**seed.GPU_CLUSTER, "name": CLUSTER}
    workload = {**seed.WORKLOADS[0], "name": WORKLOAD}
    results = [
        {
            "release": REF,
            "cluster": cluster,
            "workload": workload,
            "variant": {"name": name, "position": position, "factors": factors},
            "repeat": repeat,
            "metrics": {
                "throughput_tokens_per_s": 1000.0 * gain * (1 + 0.01 * repeat),
                "peak_memory_gib": 60.0 - 5 * position + 0.1 * repeat,
            },
        }
        for name, position, factors, gain in (("Base", 0, [], 1.0), (VARIANT, 1, ["evil"], 1.2))
        for repeat in range(4)
    ]
    with httpx.Client(base_url=server.api, timeout=60.0) as client:
        response = client.post("/releases", json=release, headers=admin)
        assert response.status_code == 201, response.text
        response = client.post("/results", json={"results": results}, headers=ci)
        assert response.status_code == 201, response.text


@pytest.fixture(params=["sqlite", "postgresql"])
def evil_server(request: pytest.FixtureRequest, db_factory: DatabaseFactory) -> Iterator[LiveServer]:
    server = start_live_server(db_factory.new(request.param))
    try:
        _seed(server)
        yield server
    finally:
        server.stop()


def _assert_plain_charts(page: Any, where: str) -> None:
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg').length > 0")
    charts = page.evaluate(SVG_STATE_JS)
    assert charts, where
    for chart in charts:
        assert chart["links"] == 0, (where, chart["id"], chart["text"])
        assert chart["styled"] == 0, (where, chart["id"], chart["text"])
    drawn = "\n".join(c["text"] for c in charts)
    # The markup is drawn as characters: in the legend, on the axes, in the titles.
    for name in (VARIANT, WORKLOAD, CLUSTER, TAG):
        assert name in drawn, (where, name)


def test_names_with_markup_stay_plain_text_in_charts(
    page: Any, evil_server: LiveServer, console: Console
) -> None:
    page.set_default_timeout(60_000)  # a loaded machine: the default 15 s is not always enough
    ref = quote(REF, safe=":")
    open_page(page, f"{evil_server.url}/releases/{ref}")
    _assert_plain_charts(page, "release page")
    response = page.goto(f"{evil_server.url}/api/v1/releases/{ref}/report?format=html")
    assert response is not None and response.status == 200
    _assert_plain_charts(page, "report")
    console.expected.append("status of 404 (Not Found)")  # the report's favicon.ico guess
    assert_no_console_errors(console)
