"""Release comparison: what the comparison page, ``GET /api/v1/releases/{ref}/comparison``, every report
format and the dashboard read.

- :mod:`.model`: the options and the result dataclasses;
- :mod:`.build`: one release against its baseline release and its lookback releases (the build and
  its cache); :mod:`.assemble` makes the comparison of what the build loaded, :mod:`.deltas` its
  release-over-release checks, :mod:`.records` the parts read straight from rows;
- :mod:`.run_sets`: two arbitrary sets of runs, cell against cell;
- :mod:`.loading`: rows in a fixed number of queries; :mod:`.family`: family order, manifest diff;
- :mod:`.jsontext`: canonical JSON (the same data gives the same bytes).
"""

from ablate.backend.services.comparison.build import build_release_comparison
from ablate.backend.services.comparison.family import order_family
from ablate.backend.services.comparison.jsontext import json_text
from ablate.backend.services.comparison.model import (
    SCHEMA_VERSION,
    ComparisonOptions,
    ReleaseComparison,
    ReleaseDelta,
    RunSetComparison,
)
from ablate.backend.services.comparison.run_sets import (
    compare_run_sets,
    parse_run_ids,
    release_run_ids,
    study_run_ids,
)

__all__ = [
    "SCHEMA_VERSION",
    "ComparisonOptions",
    "ReleaseComparison",
    "ReleaseDelta",
    "RunSetComparison",
    "build_release_comparison",
    "compare_run_sets",
    "json_text",
    "order_family",
    "parse_run_ids",
    "release_run_ids",
    "study_run_ids",
]
