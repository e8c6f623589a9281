"""``/metrics`` in Prometheus text format: request counts and latencies, and runs by status.

Each app has its own CollectorRegistry, so several apps in one process (tests) do not clash. Run
counts are read from the database at scrape time: several API processes report the same truth.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from ablate.backend.api import auth
from ablate.backend.db.database import Database
from ablate.backend.db.models import Run, RunStatus, Study, StudyStatus

router = APIRouter(tags=["health"])


class DatabaseCollector(Collector):
    def __init__(self, database: Database) -> None:
        self.database = database

    def collect(self) -> Iterator[GaugeMetricFamily]:
        runs = GaugeMetricFamily("ablate_runs", "Runs stored, by status.", labels=["status"])
        studies = GaugeMetricFamily("ablate_studies", "Studies stored, by status.", labels=["status"])
        try:
            with self.database.read() as session:
                run_counts = dict(
                    session.execute(select(Run.status, func.count()).group_by(Run.status)).all()
                )
                study_counts = dict(
                    session.execute(select(Study.status, func.count()).group_by(Study.status)).all()
                )
        except Exception:  # a scrape must not fail because the database hiccuped; readyz reports that
            return
        for status in RunStatus:
            runs.add_metric([status.value], float(run_counts.get(status.value, 0)))
        for study_status in StudyStatus:
            studies.add_metric([study_status.value], float(study_counts.get(study_status.value, 0)))
        yield runs
        yield studies


def make_registry(database: Database) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(DatabaseCollector(database))
    return registry


@router.get("/metrics", include_in_schema=False, dependencies=[Depends(auth.metrics_reader)])
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics_registry), media_type=CONTENT_TYPE_LATEST)
