"""Every drill-down link of the dashboard, built here and nowhere else.

A number on a page links to the filtered run list (``/runs?...``) of exactly the runs that produced
it; a cell links to its history across the family's releases. Pages never concatenate these URLs
themselves, so the parameter names stay those :mod:`ablate.backend.dashboard.views.runlist` reads.
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


@dataclass(frozen=True)
class RunsLink:
    """The filters of a run-list link; a list of releases or variants stands for any of them."""

    release: str | Iterable[str] | None = None
    cluster: str | None = None
    workload: str | None = None
    variant: str | Iterable[str] | None = None
    study: int | None = None
    status: str | None = None
    ids: Sequence[int] = ()
    excluded: bool | None = None
    cursor: str | None = None


def runs_url(link: RunsLink | None = None) -> str:
    """``/runs?release=...&cluster=...`` of ``link``'s filters (none: every run); a list of
    releases or variants repeats the parameter."""
    link = link or RunsLink()
    params: list[tuple[str, str]] = []
    for key, value in (("release", link.release), ("variant", link.variant)):
        if isinstance(value, str):
            params.append((key, value))
        elif value is not None:
            params += [(key, v) for v in dict.fromkeys(value)]
    singles = (("cluster", link.cluster), ("workload", link.workload), ("status", link.status))
    for key, one in (*singles, ("cursor", link.cursor)):
        if one:
            params.append((key, one))
    if link.study is not None:
        params.append(("study", str(link.study)))
    if link.ids:
        params.append(("ids", ",".join(str(i) for i in sorted(set(link.ids)))))
    if link.excluded is not None:
        params.append(("excluded", "true" if link.excluded else "false"))
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
    link = RunsLink(
        release=releases or None,
        cluster=cluster,
        workload=workload,
        variant=variants,
        study=next(iter(studies)) if studies else None,
        status=SUCCEEDED,
        ids=ids,
        excluded=False,
    )
    return runs_url(link)


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
