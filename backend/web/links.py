"""Every drill-down link of the dashboard, built here and nowhere else.

A number on a page links to the filtered run list (``/runs?...``) of exactly the runs that produced
it; a cell links to its history across the family's releases. Pages never concatenate these URLs
themselves, so the parameter names stay those :mod:`ablate.backend.web.views.runlist` reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlencode

RUNS_PATH = "/runs"
SUCCEEDED = "succeeded"


@dataclass(frozen=True)
class Scope:
    """Which runs one side of a comparison stands for: a release, a study or a list of run ids."""

    release: str | None = None
    study: int | None = None
    run_ids: tuple[int, ...] = ()


def runs_url(
    *,
    release: str | Iterable[str] | None = None,
    cluster: str | None = None,
    workload: str | None = None,
    variant: str | Iterable[str] | None = None,
    study: int | None = None,
    status: str | None = None,
    ids: Sequence[int] = (),
    excluded: bool | None = None,
    cursor: str | None = None,
) -> str:
    """``/runs?release=...&cluster=...``; a list of releases or variants repeats the parameter."""
    params: list[tuple[str, str]] = []
    for key, value in (("release", release), ("variant", variant)):
        if isinstance(value, str):
            params.append((key, value))
        elif value is not None:
            params += [(key, v) for v in dict.fromkeys(value)]
    for key, one in (("cluster", cluster), ("workload", workload), ("status", status), ("cursor", cursor)):
        if one:
            params.append((key, one))
    if study is not None:
        params.append(("study", str(study)))
    if ids:
        params.append(("ids", ",".join(str(i) for i in sorted(set(ids)))))
    if excluded is not None:
        params.append(("excluded", "true" if excluded else "false"))
    params.sort(key=lambda kv: kv[0] == "cursor")  # the cursor last, for readable URLs
    return f"{RUNS_PATH}?{urlencode(params)}" if params else RUNS_PATH


def cell_runs_url(
    scopes: Iterable[Scope], cluster: str, workload: str, variants: str | Iterable[str]
) -> str | None:
    """The succeeded, not excluded runs of one cell (or of several variants of it) on the given
    sides: exactly the runs the analyses read.

    None when the sides cannot be said in one filter (a release on one side, run ids on the other):
    a filter combines with AND, so such a union has no single run list.
    """
    sides = list(dict.fromkeys(scopes))
    releases = [s.release for s in sides if s.release]
    studies = {s.study for s in sides if s.study is not None}
    ids = [i for s in sides for i in s.run_ids]
    kinds = sum(1 for part in (releases, studies, ids) if part)
    if kinds != 1 or len(studies) > 1:
        return None
    return runs_url(
        release=releases or None,
        cluster=cluster,
        workload=workload,
        variant=variants,
        study=next(iter(studies)) if studies else None,
        status=SUCCEEDED,
        ids=ids,
        excluded=False,
    )


# The release page's query parameters naming the cell whose history it shows (names may hold "/").
HISTORY_KEYS = ("history_cluster", "history_workload", "history_variant", "history_metric")


def history_url(release: str, cluster: str, workload: str, variant: str, metric: str) -> str:
    """The release page with the history chart of one cell and metric (at ``#history``)."""
    query = urlencode(dict(zip(HISTORY_KEYS, (cluster, workload, variant, metric), strict=True)))
    return f"{release_url(release)}?{query}#history"


def history_api_url(image: str, cluster: str, workload: str, variant: str, metric: str) -> str:
    """``GET /api/v1/history`` of the same cell and metric: the chart's numbers as JSON."""
    query = {"image": image, "cluster": cluster, "workload": workload, "variant": variant, "metric": metric}
    return f"/api/v1/history?{urlencode(query)}"


def release_url(release: str) -> str:
    return f"/releases/{quote(release, safe=':/')}"
