"""Study routes: submit a plan, read the run matrix, cancel."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from ablate.backend.api import auth
from ablate.backend.api.deps import database
from ablate.backend.schemas.common import DbId
from ablate.backend.schemas.studies import StudyOut, StudyPlan, StudySummaryOut
from ablate.backend.services import studies

router = APIRouter(tags=["studies"])


@router.post("/studies", status_code=201, response_model=StudyOut, dependencies=[Depends(auth.admin)])
def create_study(plan: StudyPlan, request: Request) -> Any:
    """Queue one run per (variant, workload, repeat), interleaved (see ``Study.order_seed``)."""
    with database(request).transaction() as session:
        study = studies.create_study(session, plan)
        return {**studies.study_matrix(session, study), "warnings": plan.advisories()}


@router.get("/studies", response_model=list[StudySummaryOut], dependencies=[Depends(auth.read)])
def list_studies(request: Request, limit: int = Query(100, ge=1, le=1000)) -> Any:
    with database(request).read() as session:
        return [studies.study_summary(s) for s in studies.list_studies(session, limit=limit)]


@router.get("/studies/{study_id}", response_model=StudyOut, dependencies=[Depends(auth.read)])
def get_study(study_id: DbId, request: Request) -> Any:
    """The study and its run matrix: every run's status and progress, in queue order."""
    with database(request).read() as session:
        return studies.study_matrix(session, studies.get_study(session, study_id))


@router.post("/studies/{study_id}/cancel", response_model=StudyOut, dependencies=[Depends(auth.admin)])
def cancel_study(study_id: DbId, request: Request) -> Any:
    """Queued runs are cancelled; running ones are marked cancelled and the dispatcher stops them."""
    with database(request).transaction() as session:
        study = studies.cancel_study(session, study_id)
        return studies.study_matrix(session, study)
