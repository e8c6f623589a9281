"""The filtered run list (``/runs?release=...&cluster=...``): where every number's link lands.

It reads the filters of ``GET /api/v1/runs`` (the same service,
:func:`ablate.backend.services.runs.list_runs`) plus ``ids`` (a run-id list, for a compare side
given by run ids). A name that names nothing is a 404 naming it, a malformed value a 422: never an
empty list that looks like "no runs".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session
from starlette.datastructures import QueryParams

from ablate.backend.dashboard.links import RunsLink, runs_url
from ablate.backend.db.models import RunStatus, Study
from ablate.backend.domain.metrics import KNOWN_METRICS, describe_metric
from ablate.backend.schemas.common import ID_RULE, parse_db_id
from ablate.backend.services import runs as run_service
from ablate.backend.services.comparison import parse_run_ids
from ablate.backend.services.errors import FieldError, NotFound, ValidationProblem

PAGE_SIZE = run_service.MAX_PAGE
MAX_NAMES = 20  # per repeated filter: a link names at most a handful of variants or releases


@dataclass
class RunListPage:
    filters: list[tuple[str, str]]  # (what, value) as the page lists them
    items: list[dict[str, Any]]
    metric_names: list[str]  # registered metrics first, in the registry's order (throughput leads)
    metric_headers: dict[str, str]  # name -> "Throughput (tokens/s)"
    next_url: str | None
    clear_url: str


def _one(params: QueryParams, key: str) -> str | None:
    values = [v.strip() for v in params.getlist(key) if v.strip()]
    if len(values) > 1:
        raise ValidationProblem.at(key, f"give one {key}, got {len(values)}")
    return values[0] if values else None


def _many(params: QueryParams, key: str) -> tuple[str, ...]:
    values = tuple(dict.fromkeys(v.strip() for v in params.getlist(key) if v.strip()))
    if len(values) > MAX_NAMES:
        raise ValidationProblem.at(key, f"at most {MAX_NAMES} values")
    if any(len(v) > 265 for v in values):
        raise ValidationProblem.at(key, "a name is at most 265 characters")
    return values


def parse_filters(session: Session, params: QueryParams) -> run_service.RunFilters:
    """The filters of a run-list URL, every name checked against the catalog."""
    status = _one(params, "status")
    if status is not None and status not in {s.value for s in RunStatus}:
        known = ", ".join(s.value for s in RunStatus)
        raise ValidationProblem.at("status", f"unknown status {status!r}; use one of {known}")
    study_text = _one(params, "study")
    study: int | None = None
    if study_text is not None:
        study = parse_db_id(study_text)
        if study is None:
            raise ValidationProblem.at("study", f"expected a study id ({ID_RULE}), got {study_text[:20]!r}")
        if session.get(Study, study) is None:
            raise NotFound.at("study", f"study {study} does not exist")
    ids_text = _one(params, "ids")
    excluded_text = _one(params, "excluded")
    if excluded_text is not None and excluded_text not in ("true", "false"):
        raise ValidationProblem.at("excluded", f"expected true or false, got {excluded_text!r}")
    filters = run_service.RunFilters(
        release=_many(params, "release"),
        variant=_many(params, "variant"),
        workload=_one(params, "workload"),
        cluster=_one(params, "cluster"),
        status=status,
        study_id=study,
        run_ids=tuple(parse_run_ids(ids_text, "ids")) if ids_text else (),
        excluded=None if excluded_text is None else excluded_text == "true",
    )
    unknown = run_service.unknown_names(session, filters)
    if unknown:
        errors = [FieldError(kind, f"no {kind} is named {name!r}") for kind, name in unknown]
        raise NotFound("; ".join(f"{e.loc}: {e.msg}" for e in errors), errors)
    return filters


def _described(filters: run_service.RunFilters) -> list[tuple[str, str]]:
    kinds = ("release", "cluster", "workload", "variant")
    out = [(kind, name) for kind in kinds for name in filters.names(kind)]
    if filters.study_id is not None:
        out.append(("study", f"#{filters.study_id}"))
    if filters.status:
        out.append(("status", filters.status))
    if filters.run_ids:
        out.append(("run ids", ", ".join(str(i) for i in filters.run_ids)))
    if filters.excluded is not None:
        out.append(("excluded", "only excluded runs" if filters.excluded else "not excluded"))
    return out


_REGISTRY_ORDER = {name: i for i, name in enumerate(KNOWN_METRICS)}


def _metric_order(name: str) -> tuple[int, str]:
    return (_REGISTRY_ORDER.get(name, len(_REGISTRY_ORDER)), name)


def run_list_page(session: Session, params: QueryParams) -> RunListPage:
    filters = parse_filters(session, params)
    cursor = _one(params, "cursor")
    items, next_cursor = run_service.list_runs(session, filters, cursor=cursor, limit=PAGE_SIZE)
    metric_names = sorted({m for item in items for m in item["metrics"]}, key=_metric_order)
    next_url = None
    if next_cursor:
        link = RunsLink(
            release=filters.names("release"),
            cluster=filters.cluster if isinstance(filters.cluster, str) else None,
            workload=filters.workload if isinstance(filters.workload, str) else None,
            variant=filters.names("variant"),
            study=filters.study_id,
            status=filters.status,
            ids=filters.run_ids,
            excluded=filters.excluded,
            cursor=next_cursor,
        )
        next_url = runs_url(link)
    return RunListPage(
        filters=_described(filters),
        items=items,
        metric_names=metric_names,
        metric_headers={m: describe_metric(m).axis_title() for m in metric_names},
        next_url=next_url,
        clear_url=runs_url(),
    )
