"""Chart details in headless Chromium: the repeats drawn over the release page's bars."""

from __future__ import annotations

from typing import Any

import pytest

from tests.web import seed
from tests.web.conftest import Console, Site
from tests.web.helpers import assert_no_console_errors, open_page, shoot

pytestmark = pytest.mark.browser

# The drawn bars and points of a chart: each bar's pixel box and each point's pixel centre, per trace.
DRAWN_JS = """
(id) => {
  const gd = document.getElementById(id);
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.right, r.top, r.bottom]; };
  const centre = e => {
    const r = e.getBoundingClientRect();
    return [(r.left + r.right) / 2, (r.top + r.bottom) / 2];
  };
  return {
    traces: gd.data.map(
      t => ({type: t.type, name: t.name, ids: t.customdata ? Array.from(t.customdata) : []})),
    bars: Array.from(gd.querySelectorAll('.barlayer g.trace')).map(
      t => Array.from(t.querySelectorAll('g.point path')).map(box)),
    points: Array.from(gd.querySelectorAll('.scatterlayer g.trace')).map(
      t => Array.from(t.querySelectorAll('path.point')).map(centre)),
  };
}
"""


def test_release_bar_chart_shows_each_repeat_as_a_point_on_its_bar(
    page: Any, site: Site, console: Console, screenshots: Any
) -> None:
    open_page(page, f"{site.url}/releases/{seed.NEW}")
    div = page.locator('[data-chart="ablation"] .js-plotly-plot').first.get_attribute("id")
    drawn = page.evaluate(DRAWN_JS, div)
    variants = [v[0] for v in seed.LADDER]
    bars = [t for t in drawn["traces"] if t["type"] == "bar"]
    points = [t for t in drawn["traces"] if t["type"] == "scatter"]
    assert [t["name"] for t in bars] == [t["name"] for t in points] == variants
    ids = site.data.run_ids[seed.NEW]  # submitted workload by workload, variant by variant, repeat by repeat
    per_cell = seed.REPEATS
    for j, (trace, centres) in enumerate(zip(points, drawn["points"], strict=True)):
        expected = [
            ids[(w * len(variants) + j) * per_cell + r]
            for w in range(len(seed.WORKLOADS))
            for r in range(per_cell)
        ]
        assert trace["ids"] == expected  # one point per succeeded run, named by its run id
        assert len(centres) == len(expected)
        # Each point is drawn over one of its own variant's bars (one bar per workload).
        for x, _ in centres:
            assert any(left <= x <= right for left, right, _, _ in drawn["bars"][j]), (trace["name"], x)
    shoot(page, screenshots, "release-repeats")
    assert_no_console_errors(console)
