"""The scaling curves' writer (benchmarks/_scaling.py): a table and a figure from given medians, and one
page that opens offline. Nothing here is timed; the measurements are benchmarks/scaling.py's."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import plotly.io as pio

ROOT = Path(__file__).resolve().parents[2]


def _scaling() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_scaling", ROOT / "benchmarks" / "_scaling.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_curve_becomes_a_table_a_figure_and_an_offline_page(tmp_path: Path) -> None:
    scaling = _scaling()
    curve = scaling.Curve(
        name="dispatch",
        title="Dispatch",
        x_label="runs queued",
        y_label="runs/s",
        x=[64, 128, 256],
        series={"dispatcher + database": [210.0, 305.5, None], "bare Ray tasks": [900.0, 1200.0, 1300.0]},
        columns={"ratio": ["4.29x", "3.93x", "-"]},
        note="</script> in a note stays text",
    )
    table = scaling.markdown_table(curve).splitlines()
    assert table[0] == "| runs queued | dispatcher + database | bare Ray tasks | ratio |"
    assert table[2:] == [
        "| 64 | 210 | 900 | 4.29x |",
        "| 128 | 306 | 1,200 | 3.93x |",
        "| 256 | - | 1,300 | - |",
    ]

    page = scaling.write(curve, tmp_path)
    fig = pio.from_json((tmp_path / "dispatch.json").read_text())  # plotly validates it on reading
    assert [t.name for t in fig.data] == ["dispatcher + database", "bare Ray tasks"]
    assert list(fig.data[0].y) == [210.0, 305.5, None]
    assert fig.layout.xaxis.type == "log"
    assert fig.layout.meta["table"] == "\n".join(table)

    text = page.read_text()
    assert text.count("<script") == 2  # plotly.js once, the figures once: no CDN, opens offline
    assert "cdn" not in text.split("<script", 1)[0].lower()
    assert text.count("Plotly.newPlot(") == 1
    assert "</script> in a note" not in text
    literal = text.rsplit("})(", 1)[1].rsplit(");", 1)[0]
    assert json.loads(literal.replace("<\\/", "</"))["data"][1]["name"] == "bare Ray tasks"
