"""`ablate demo`: a real ablation study of a tiny llama-style model on this machine's CPUs.

The study is the 2x2 factorial plan of ``examples/plans/cpu-factorial-tiny.yaml`` (Base,
+CompilerOpt, +CkptOpt, +CompilerOpt+CkptOpt, 5 repeats). Each demo gets a release of its own
(``ablate-demo:0.1``, ``0.2``, ...), so a second demo compares itself against the first.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

import ablate.examples
from ablate.backend.db.models import Release, Study
from ablate.backend.domain.states import TERMINAL_STATES, RunStatus
from ablate.backend.errors import AblateError
from ablate.backend.schemas.catalog import ReleaseCreate
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import catalog, studies
from ablate.backend.services.comparison import ReleaseComparison

EXAMPLES_DIR = Path(ablate.examples.__file__).resolve().parent
RELEASE_FILE = EXAMPLES_DIR / "demo" / "release.yaml"
PLAN_FILE = EXAMPLES_DIR / "plans" / "cpu-factorial-tiny.yaml"


def _load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AblateError(f"the demo needs {path} (installed with Ablate): {exc.strerror}") from None
    if not isinstance(data, dict):
        raise AblateError(f"{path}: expected a mapping")
    return data


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def next_tag(existing: list[str]) -> str:
    """``0.1``, ``0.2``, ...: one more than the newest demo release."""
    minors = [
        int(t.split(".", 1)[1]) for t in existing if t.startswith("0.") and t.split(".", 1)[1].isdigit()
    ]
    return f"0.{max(minors, default=0) + 1}"


def demo_release(session: Session) -> ReleaseCreate:
    data = _load_yaml(RELEASE_FILE)
    image = str(data["image"])
    tags = list(session.scalars(select(Release.tag).where(Release.image == image)))
    data["tag"] = next_tag(tags)
    # The demo's "image" is this machine's Python environment: record what it really holds.
    manifest = {
        "python": platform.python_version(),
        **{name: v for name in ("torch", "numpy") if (v := _version(name)) is not None},
    }
    data["manifest"] = {**(data.get("manifest") or {}), **manifest}
    return ReleaseCreate.model_validate(data)


def demo_plan(release_ref: str, *, repeats: int | None = None) -> StudyPlan:
    data = _load_yaml(PLAN_FILE)
    data["release"] = release_ref
    data["name"] = f"demo: {data.get('name', 'factorial')}"
    data["created_by"] = "ablate demo"
    if repeats is not None:
        data["repeats"] = repeats
    return StudyPlan.model_validate(data)


def create_demo_study(session: Session, *, repeats: int | None = None) -> Study:
    """Register the next demo release and queue its study, in the caller's transaction."""
    release = catalog.create_release(session, demo_release(session))
    return studies.create_study(session, demo_plan(release.ref, repeats=repeats))


@dataclass
class ProgressLines:
    """Turns successive study matrices into plain progress lines: what changed since the last one.

    A line for every run that started or ended ("run 7/20 done: Base repeat 2 (run 9), 1,234
    tokens/s") and one when the study's status changes; the demo writes them to its log file (and to
    stdout when that is not a terminal, where progress bars do not show).
    """

    runs: dict[int, str] = field(default_factory=dict)  # run id -> the status last reported
    study: str | None = None

    def update(self, matrix: dict[str, Any]) -> list[str]:
        runs = matrix["runs"]
        lines: list[str] = []
        if self.study is None:
            lines.append(f"study {matrix['id']}: {len(runs)} runs, {matrix['status']}")
        ended = sum(1 for status in self.runs.values() if status in TERMINAL_STATES)
        for r in runs:
            status, before = str(r["status"]), self.runs.get(r["id"])
            if status == before:
                continue
            self.runs[r["id"]] = status
            what = f"{r['variant']} repeat {r['repeat']} (run {r['id']})"
            if status in TERMINAL_STATES:
                ended += 1
                word = "done" if status == RunStatus.succeeded else status
                line = f"run {ended}/{len(runs)} {word}: {what}"
                if status == RunStatus.succeeded and r["latest_throughput"]:
                    line += f", {r['latest_throughput']:,.0f} tokens/s"
                elif r["error"]:
                    line += f": {str(r['error']).splitlines()[0]}"
                lines.append(line)
            elif status == RunStatus.running:
                lines.append(f"run started: {what}")
            elif before is not None:
                lines.append(f"run {status} again: {what}")
        if self.study is not None and self.study != matrix["status"]:
            lines.append(f"study {matrix['id']}: {matrix['status']}")
        self.study = str(matrix["status"])
        return lines


def python_summary() -> str:
    torch = _version("torch")
    if torch is None:
        raise AblateError(
            "the demo trains a real model and needs PyTorch: pip install -e '.[bench]' "
            "(the CPU build: pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu)"
        )
    return f"Python {platform.python_version()} on {sys.platform}, torch {torch}"


def host_load() -> tuple[float, int] | None:
    """(1-minute load average, CPU count) of this machine; None where the OS does not say."""
    try:
        return os.getloadavg()[0], os.cpu_count() or 1
    except (AttributeError, OSError):
        return None


def trust_notes(comparison: ReleaseComparison, load: tuple[float, int] | None = None) -> list[str]:
    """Why the demo's numbers should not be trusted, if they should not; empty when nothing is wrong.

    The demo measures on whatever machine runs it: other work on it spreads the repeats (on a busy
    2-core box they spread 25-69% and an identical rerun differed by +136%).
    """
    notes: list[str] = []
    if load is not None and load[0] > load[1]:
        notes.append(f"measured while the host was busy: load {load[0]:.1f} on {load[1]} CPUs")
    # What the runners recorded around each run (workers/runners/hostload.py).
    busy = [m for m in comparison.missing if "measured while the host was busy" in m]
    notes.extend(busy)
    rungs = [
        (e.workload, v)
        for e in comparison.ladders
        if e.metric == comparison.primary_metric
        for v in e.analysis.variants
        if v.summary.n
    ]
    noisy = [(w, v) for w, v in rungs if v.summary.noisy]
    if noisy:
        worst = max((v.summary.cv or 0.0) for _, v in noisy)
        notes.append(
            f"{len(noisy)} of {len(rungs)} variants are noisy (measured CV up to {worst:.1%}, upper "
            f"bound above {comparison.method.noisy_cv:.0%}): differences smaller than the spread mean nothing"
        )
    few = sorted({v.summary.n for _, v in rungs if v.summary.n < 5})
    if few:
        sizes = ", ".join(map(str, few))
        notes.append(f"only {sizes} repeats per variant: 5 are needed for the stated power")
    untestable = len(comparison.not_testable)
    if untestable:
        notes.append(f"{untestable} release-over-release comparisons are not testable (fewer than 2 repeats)")
    return notes


def headlines(comparison: ReleaseComparison) -> list[str]:
    """What the demo found, one line per workload: the whole ladder's gain over its first rung on the
    primary metric, with its interval, as the release page's headline says it."""
    from ablate.backend.domain.formatting import ratio_ci
    from ablate.backend.domain.metrics import describe_metric

    lines = []
    for entry in comparison.ladders:
        total = entry.analysis.total
        if entry.metric != comparison.primary_metric or total is None or total.ratio is None:
            continue
        sure = "significant" if total.significant else "not significant"
        lines.append(
            f"headline: {total.contender} is {ratio_ci(total.ratio, total.ci_low, total.ci_high)} "
            f"{total.reference}'s {describe_metric(entry.metric).label.lower()} on {entry.workload} "
            f"(95% interval; {sure})"
        )
    return lines
