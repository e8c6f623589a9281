"""The studies list and the study page: the run matrix (variant x workload x repeat) with progress."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from ablate.backend.dashboard.links import RunsLink, runs_url
from ablate.backend.db.models import StudyStatus
from ablate.backend.domain.states import TERMINAL_STATES
from ablate.backend.schemas.studies import StudySummaryOut
from ablate.backend.services import studies as study_service

STATUS_ORDER = ("running", "queued", "succeeded", "failed", "cancelled")


@dataclass
class MatrixRow:
    variant: str
    cells: list[dict[str, Any] | None]  # one per repeat; None where the plan has no such run
    runs_url: str = ""  # this variant's runs on this workload, in the run list


@dataclass
class MatrixBlock:
    workload: str
    rows: list[MatrixRow]


@dataclass
class StudyPage:
    study: dict[str, Any]
    status: str  # what the page shows: "running" as soon as a run is
    work: float  # finished runs plus the step progress of running ones
    repeats: list[int]
    blocks: list[MatrixBlock]
    total: int
    done: int
    terminal: bool
    runs_url: str = ""  # every run of the study
    status_urls: dict[str, tuple[int, str]] = field(default_factory=dict)  # status -> (count, run list)

    @property
    def progress(self) -> float:
        return self.work / self.total if self.total else 0.0


def shown_status(stored: str, counts: dict[str, int]) -> str:
    """The stored study status is refreshed when runs finish; while one runs, show "running"."""
    if stored == StudyStatus.queued.value and counts.get("running"):
        return StudyStatus.running.value
    return stored


def _blocks(matrix: dict[str, Any], study_id: int) -> tuple[list[int], list[MatrixBlock]]:
    runs = matrix["runs"]
    repeats = sorted({r["repeat"] for r in runs}) or list(range(matrix["repeats"]))
    by_cell = {(r["workload"], r["variant"], r["repeat"]): r for r in runs}
    variants = list(dict.fromkeys([*matrix["variants"], *(r["variant"] for r in runs)]))
    workloads = list(dict.fromkeys([*matrix["workloads"], *(r["workload"] for r in runs)]))
    blocks = [
        MatrixBlock(
            workload=w,
            rows=[
                MatrixRow(
                    variant=v,
                    cells=[by_cell.get((w, v, k)) for k in repeats],
                    runs_url=runs_url(RunsLink(study=study_id, workload=w, variant=v)),
                )
                for v in variants
            ],
        )
        for w in workloads
    ]
    return repeats, blocks


def study_page(session: Session, study_id: int) -> StudyPage:
    study = study_service.get_study(session, study_id)
    matrix = study_service.study_matrix(session, study)
    repeats, blocks = _blocks(matrix, study_id)
    counts = matrix["counts"]
    total = sum(counts.values())
    done = sum(n for s, n in counts.items() if s in TERMINAL_STATES)
    # Finished runs count whole, running ones by their step progress (as the live script does).
    work = sum(1.0 if r["status"] in TERMINAL_STATES else (r["progress"] or 0.0) for r in matrix["runs"])
    shown = shown_status(matrix["status"], counts)
    return StudyPage(
        study=matrix,
        status=shown,
        work=work,
        repeats=repeats,
        blocks=blocks,
        total=total,
        done=done,
        terminal=matrix["status"] in TERMINAL_STATES,
        runs_url=runs_url(RunsLink(study=study_id)),
        status_urls={
            s: (counts[s], runs_url(RunsLink(study=study_id, status=s)))
            for s in STATUS_ORDER
            if counts.get(s)
        },
    )


class StudyListItem(StudySummaryOut):
    """A study in the dashboard's lists: what ``GET /studies`` gives (its status as the page shows it),
    and its runs counted."""

    counts: dict[str, int]
    total: int
    done: int


def study_items(session: Session, *, limit: int = 100, active_only: bool = False) -> list[StudyListItem]:
    items: list[StudyListItem] = []
    for study in study_service.list_studies(session, limit=limit):
        if active_only and study.status in TERMINAL_STATES:
            continue
        counts = dict(study_service.study_matrix(session, study)["counts"])
        total = sum(counts.values())
        status = shown_status(study.status, counts)
        items.append(
            StudyListItem(
                **{**study_service.study_summary(study), "status": status},
                counts={s: counts[s] for s in STATUS_ORDER if counts.get(s)},
                total=total,
                done=sum(n for s, n in counts.items() if s in TERMINAL_STATES),
            )
        )
    return items
