"""``GET /api/v1/advice/checkpointing``: how many layers to checkpoint. Thin: the work is in
:mod:`ablate.backend.services.advice` and :mod:`ablate.backend.analysis.checkpointing`."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request

from ablate.backend.analysis.checkpointing import DEFAULT_UTILISATION
from ablate.backend.api import auth
from ablate.backend.api.deps import database
from ablate.backend.schemas.advice import CheckpointingAdviceOut
from ablate.backend.services import advice as svc

router = APIRouter(tags=["advice"], dependencies=[Depends(auth.read)])


@router.get(
    "/advice/checkpointing",
    response_model=CheckpointingAdviceOut,
    summary="Recommend how many layers to checkpoint",
)
def checkpointing(
    request: Request,
    release: str = Query(..., min_length=3, max_length=265, description="The release IMAGE:TAG."),
    cluster: str = Query(..., min_length=1, max_length=200, description="Cluster name."),
    workload: str = Query(..., min_length=1, max_length=200, description="Workload name."),
    memory_gib: float | None = Query(
        None, description="Memory of one device in GiB (default: the cluster's label or device model)."
    ),
    utilisation: float = Query(
        DEFAULT_UTILISATION, description="Fraction of device memory the peak may use, in (0, 1]."
    ),
) -> CheckpointingAdviceOut:
    """The smallest number of checkpointed layers whose predicted peak memory, at the upper end of
    its 95% prediction interval, fits ``memory_gib x utilisation``; the predicted throughput against
    no checkpointing; the per-k table; the run ids the prediction used (``basis``: ``measured``,
    ``similar workloads`` or ``model shape only``).

    Unknown release, cluster or workload: 404. A budget <= 0, a utilisation outside (0, 1], a
    workload without a layer count, a cluster whose device memory is unknown: 422. All problem+json.
    """
    with database(request).read() as session:
        result = svc.checkpointing_advice(
            session, release, cluster, workload, memory_gib=memory_gib, utilisation=utilisation
        )
    return result.to_model()
