"""Page helpers of the browser tests: open a page and wait for its charts, read plotly traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.web.conftest import Console

# Every chart div rendered by plotly, its trace count from plotly's own data and from its SVG.
CHART_STATE_JS = """
() => Array.from(document.querySelectorAll('[data-chart]')).map(el => {
  const plot = el.querySelector('.js-plotly-plot');
  return {
    kind: el.dataset.chart,
    expected: el.dataset.expectedTraces === undefined ? null : Number(el.dataset.expectedTraces),
    rendered: !!plot,
    data: plot && plot.data ? plot.data.length : 0,
    svgTraces: plot ? plot.querySelectorAll('.main-svg g.trace').length : 0,
    hasSvg: !!(plot && plot.querySelector('svg.main-svg')),
    names: plot && plot.data ? plot.data.map(t => t.name) : [],
    x: plot && plot.data && plot.data[0] ? Array.from(plot.data[0].x || []) : [],
  };
})
"""


def open_page(page: Any, url: str, *, status: int = 200) -> Any:
    response = page.goto(url, wait_until="load")
    assert response is not None, url
    assert response.status == status, f"{url}: HTTP {response.status}"
    # plotly draws synchronously when its script runs, but wait for every chart div to be a plot.
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('[data-chart]'))"
        ".every(el => el.querySelector('.js-plotly-plot .main-svg'))"
    )
    # A server traceback must never reach a page; a run's own log tail may quote one, so skip that.
    text = page.evaluate(
        "() => { const b = document.body.cloneNode(true);"
        " b.querySelectorAll('pre.log').forEach(e => e.remove()); return b.innerText; }"
    )
    assert "Traceback" not in text and "Internal Server Error" not in text, url
    return response


def chart_state(page: Any) -> list[dict[str, Any]]:
    return page.evaluate(CHART_STATE_JS)


def shoot(page: Any, screenshots: Path, name: str) -> Path:
    path = screenshots / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def assert_no_console_errors(console: Console) -> None:
    unexpected = console.unexpected()
    assert not unexpected, "\n".join(unexpected)
