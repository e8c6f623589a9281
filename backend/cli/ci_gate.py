"""The gate of `ablate ci check`: a release's comparison (the server's JSON,
``GET /api/v1/releases/{ref}/comparison``) judged against ``--fail-on``, and its Markdown summary.

A cell is *regressed* when the server's verdict is (past the threshold and significant after the
Benjamini-Hochberg adjustment). It is *suspect* when its change passes the threshold in the worse
direction and its own test rejects (p < alpha) but the adjustment does not confirm it (the server's
``suspect``): ``--fail-on suspect`` fails on those too. A change that
only points to an improvement never fails a gate.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from ablate.backend.cli.http import describe_problem
from ablate.backend.dashboard.links import RunsLink, runs_url
from ablate.backend.domain.statistics import CONFIDENCE
from ablate.backend.errors import AblateError
from ablate.backend.reports.markdown import escape_md

FAIL_ON = ("regressed", "suspect")
COUNTED = ("regressed", "suspect", "improved", "unchanged", "not testable", "not compared")


@dataclass(frozen=True)
class FlaggedCell:
    verdict: str  # regressed | suspect
    cluster: str
    workload: str
    rung: str  # the variant
    metric: str
    unit: str
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    q_value: float | None
    runs: str  # the dashboard path of the cell's runs in both releases


@dataclass(frozen=True)
class GateResult:
    release: str
    baseline: str | None
    fail_on: str
    failed: bool
    confidence: float
    counts: dict[str, int]
    flagged: list[FlaggedCell]
    pending_runs: int
    missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def classify(delta: dict[str, Any]) -> str:
    """A delta as the gate counts it: one of COUNTED."""
    result = delta.get("result")
    if not result:
        return "not compared"
    verdict = str(result.get("verdict"))
    if verdict == "unchanged" and result.get("suspect") and result.get("indicated") == "regressed":
        return "suspect"
    return verdict if verdict in COUNTED else "not compared"


def gate(comparison: dict[str, Any], fail_on: str) -> GateResult:
    """Judge a release comparison: which cells are regressed or suspect, and whether the gate fails."""
    release = comparison["release"]["ref"]
    baseline = (comparison.get("baseline") or {}).get("ref")
    counts = dict.fromkeys(COUNTED, 0)
    flagged: list[FlaggedCell] = []
    for delta in comparison.get("deltas") or []:
        kind = classify(delta)
        counts[kind] += 1
        if kind not in FAIL_ON:
            continue
        r = delta["result"]
        releases = [release] + ([baseline] if baseline else [])
        flagged.append(
            FlaggedCell(
                verdict=kind,
                cluster=delta["cluster"],
                workload=delta["workload"],
                rung=delta["variant"],
                metric=delta["metric"],
                unit=delta.get("unit") or "",
                change_pct=r.get("change_pct"),
                ci_low_pct=r.get("change_ci_low"),
                ci_high_pct=r.get("change_ci_high"),
                q_value=r.get("q_value"),
                runs=runs_url(
                    RunsLink(
                        release=releases,
                        cluster=delta["cluster"],
                        workload=delta["workload"],
                        variant=delta["variant"],
                    )
                ),
            )
        )
    flagged.sort(key=lambda c: (c.verdict != "regressed", c.cluster, c.workload, c.rung, c.metric))
    failing = {"regressed"} if fail_on == "regressed" else {"regressed", "suspect"}
    return GateResult(
        release=release,
        baseline=baseline,
        fail_on=fail_on,
        failed=any(c.verdict in failing for c in flagged),
        confidence=float((comparison.get("method") or {}).get("confidence") or CONFIDENCE),
        counts=counts,
        flagged=flagged,
        pending_runs=pending_runs(comparison),
        missing=[str(m) for m in comparison.get("missing") or []],
    )


def pending_runs(comparison: dict[str, Any]) -> int:
    """Runs of the release still queued or running."""
    return sum(int(c.get("pending") or 0) for c in comparison.get("cells") or [])


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.2f}%"


def _q(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def render_markdown(result: GateResult, *, dashboard: str) -> str:
    """The job summary: the outcome, the counts, and each regressed or suspect cell with its change,
    interval, q, rung and a link to its runs on the dashboard."""
    against = f" against `{escape_md(result.baseline)}`" if result.baseline else ""
    outcome = "failed" if result.failed else "passed"
    lines = [f"### Ablate gate: `{escape_md(result.release)}`{against}: {outcome}", ""]
    counts = ", ".join(f"{n} {k}" for k, n in result.counts.items())
    lines += [f"Fails on: {result.fail_on}. Verdicts: {counts}.", ""]
    if result.baseline is None:
        lines += ["No baseline release to compare with: nothing is judged.", ""]
    if result.pending_runs:
        lines += [
            f"{result.pending_runs} run(s) of the release still queued or running (`--wait` waits).",
            "",
        ]
    if result.flagged:
        level = f"{result.confidence:.0%}"
        lines.append(
            f"| verdict | cluster | workload | rung | metric | change | {level} interval | q | runs |"
        )
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for c in result.flagged:
            verdict = f"**{c.verdict}**" if c.verdict == "regressed" else c.verdict
            interval = f"[{_pct(c.ci_low_pct)}, {_pct(c.ci_high_pct)}]"
            names = [escape_md(c.cluster), escape_md(c.workload), escape_md(c.rung), escape_md(c.metric)]
            row = [
                verdict,
                *names,
                _pct(c.change_pct),
                interval,
                _q(c.q_value),
                f"[runs]({dashboard}{c.runs})",
            ]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        lines.append(
            "_change: geometric mean of this release over the baseline's; q: Benjamini-Hochberg adjusted "
            "p; suspect: past the threshold in the worse direction with p < alpha, not confirmed by q._"
        )
        lines.append("")
    elif result.baseline is not None:
        lines += ["No cell regressed" + (" or is suspect." if result.fail_on == "suspect" else "."), ""]
    lines.append(f"Release page: {dashboard}/releases/{result.release}")
    return "\n".join(lines) + "\n"


def wait_for_runs(
    http: httpx.Client, path: str, params: dict[str, Any], *, timeout_s: float, poll_s: float
) -> dict[str, Any]:
    """The comparison once no run of the release is queued or running; connection errors and 5xx
    on the way are retried until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        problem: str
        try:
            response = http.get(path, params=params)
        except httpx.TransportError as exc:
            problem = f"cannot reach {http.base_url}: {exc}"
        else:
            if response.status_code < 400:
                comparison: dict[str, Any] = response.json()
                waiting = pending_runs(comparison)
                if not waiting:
                    return comparison
                problem = f"{waiting} run(s) of the release still queued or running"
            elif response.status_code >= 500 or response.status_code == 429:
                problem = describe_problem(response)
            else:
                raise AblateError(describe_problem(response))
        if time.monotonic() + poll_s > deadline:
            raise AblateError(f"gave up waiting after {timeout_s:g} s: {problem}")
        time.sleep(poll_s)
