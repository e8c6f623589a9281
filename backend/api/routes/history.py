"""``GET /api/v1/history``: one cell and metric across an image family's releases. Thin: see
:mod:`ablate.backend.services.history`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import StringConstraints

from ablate.backend.api import auth
from ablate.backend.api.deps import database
from ablate.backend.dashboard.links import Scope, cell_runs_url
from ablate.backend.schemas.common import Line
from ablate.backend.schemas.history import HistoryOut
from ablate.backend.services import history as svc
from ablate.backend.services.comparison import ComparisonOptions

router = APIRouter(tags=["comparison"], dependencies=[Depends(auth.read)])

NameParam = Annotated[Line, StringConstraints(strip_whitespace=True, min_length=1, max_length=265)]


def _name(description: str) -> Any:
    # A fresh Query per parameter (FastAPI binds it to one name), with the bounds stated on it.
    return Query(min_length=1, max_length=265, description=description)


@router.get("/history", response_model=HistoryOut, summary="One cell and metric across releases")
def history(
    request: Request,
    image: NameParam = _name("The image family, e.g. training-nv-pytorch."),
    cluster: NameParam = _name("A cluster name."),
    workload: NameParam = _name("A workload name."),
    variant: NameParam = _name("A variant name, e.g. Base+ACCL."),
    metric: NameParam = _name("A summary metric, e.g. throughput_tokens_per_s."),
) -> Any:
    """Per release of ``image`` (family order, oldest first): n, median and interval of the cell, and
    the verdict of that release against its previous one, exactly as its release page shows it.
    Unknown names are a 404 (a 422 for a metric), naming which."""
    key = svc.CellKey(cluster, workload, variant, metric)
    options = ComparisonOptions.from_settings(request.app.state.settings)
    with database(request).read() as session:
        result = svc.cell_history(session, image, key, options)
    h = result.history
    return {
        "image": result.image,
        **vars(key),
        "unit": result.unit,
        "confidence": h.confidence,
        "interval_method": h.interval_method,
        "points": [
            {
                **vars(e),
                "runs_url": cell_runs_url([Scope(release=e.release)], key.cluster, key.workload, key.variant),
            }
            for e in h.entries
        ],
    }
