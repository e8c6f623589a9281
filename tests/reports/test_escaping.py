"""Exports show user text as written: CSV cells never run as spreadsheet formulas, Markdown names
never render as links, emphasis or HTML (both databases, through the real ingest and renderers)."""

from __future__ import annotations

import csv
import io

from ablate.backend.db.database import Database
from ablate.backend.reports import render
from ablate.backend.schemas.results import ResultsBatch
from ablate.backend.services import comparison as svc
from ablate.backend.services import ingest

IMAGE = "training-escape-pytorch"
FORMULA = "=cmd|' /C calc'!A0"
MARKUP = "<b>bold</b> [x](http://evil) *em*"


def _seed(database: Database) -> svc.ReleaseComparison:
    results = [
        {
            "release": {"image": IMAGE, "tag": "1.0", "platform": "gpu"},
            "cluster": {"name": FORMULA, "accelerator": "gpu", "devices_per_node": 8},
            "workload": {"name": "@SUM(A1:A9)", "runner": "command"},
            "variant": {"name": MARKUP, "position": 0},
            "repeat": repeat,
            "metrics": {"throughput_tokens_per_s": 1000.0 + repeat},
        }
        for repeat in range(3)
    ]
    batch = ResultsBatch.model_validate({"results": results})
    with database.transaction() as s:
        ingest.submit_results(s, batch, token_scope="admin", idempotency_key=None)
    with database.read() as s:
        return svc.build_release_comparison(s, f"{IMAGE}:1.0", options=svc.ComparisonOptions(n_resamples=199))


def test_csv_cells_that_start_like_a_formula_are_neutralised(database: Database) -> None:
    rows = list(csv.DictReader(io.StringIO(render(_seed(database), "csv"))))
    runs = [r for r in rows if r["section"] == "run"]
    assert runs and {r["cluster"] for r in runs} == {f"'{FORMULA}"}
    assert {r["workload"] for r in runs} == {"'@SUM(A1:A9)"}
    for row in rows:  # no cell of any section starts a formula
        assert not any(str(v).startswith(("=", "+", "@", "\t", "\r")) for v in row.values()), row
    assert all(float(r["value"]) >= 1000 for r in runs if r["metric"] == "throughput_tokens_per_s")


def test_markdown_shows_names_as_written(database: Database) -> None:
    md = render(_seed(database), "md")
    assert "<b>" not in md and " [x](" not in md and " *em*" not in md  # only escaped forms remain
    assert r"\<b\>bold\</b\> \[x\](http://evil) \*em\*" in md
    assert r"=cmd\|' /C calc'\!A0" in md  # the pipe cannot split a table cell either
