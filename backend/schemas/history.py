"""The body of ``GET /api/v1/history``: one cell and metric across the releases of an image family."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ablate.backend.schemas.common import Out

Verdict = Literal["regressed", "suspect", "improved", "unchanged", "not testable", "not compared"]


class HistoryPointOut(Out):
    release: str = Field(description="IMAGE:TAG, in the family's order (oldest first).")
    n: int = Field(description="Succeeded runs with a value of the metric in this cell.")
    median: float | None
    ci_low: float | None = Field(description="Interval of the median (interval_method); null below 2 runs.")
    ci_high: float | None
    noisy: bool
    verdict: Verdict | None = Field(
        description="This release against `against`, as its release page files it; null when its "
        "comparison has no row for this cell (no data, or the first release)."
    )
    indicated: str | None = Field(
        description="Where the medians point, confirmed or not (a suspect's direction)."
    )
    change_pct: float | None = Field(description="Change against `against` in percent; > 0 is better.")
    against: str | None = Field(description="The release this one was compared with (its previous one).")
    runs_url: str = Field(description="The dashboard's run list of exactly the runs behind n and median.")


class HistoryOut(Out):
    image: str
    cluster: str
    workload: str
    variant: str
    metric: str
    unit: str
    confidence: float
    interval_method: str
    points: list[HistoryPointOut]
