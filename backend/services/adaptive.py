"""Adaptive repeats: after each round of a ``repeats: {min, max}`` study, decide every comparison and
queue the next round only for the rungs some undecided comparison still needs.

The comparisons are those the report makes per workload: each rung against its reference rung
(the previous rung of the ladder) and, when the plan names a baseline release, each rung against
the same rung of the baseline. The decision itself is :mod:`ablate.backend.analysis.sequential`;
it is replayed from the first look every time, so a verdict reached at n runs stays the verdict
at n even when a rung gets more runs for another comparison, and nothing needs storing.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from ablate.backend.analysis.sequential import INCONCLUSIVE, Look, SequentialDesign, look, study_prior
from ablate.backend.db.models import Run, RunMetric, RunStatus, Study, Variant, Workload
from ablate.backend.services.run_queue import queue_runs

# The metric the verdicts are decided on: the headline of every report.
ADAPTIVE_METRIC = "throughput_tokens_per_s"
_ACTIVE = (RunStatus.queued.value, RunStatus.running.value)

# A side of a comparison: (release id, variant name, workload name).
Side = tuple[int, str, str]


@dataclass(frozen=True)
class Decision:
    """One comparison of a study: where it stands after the runs so far."""

    workload: str
    rung: str  # the contender rung
    against: str  # its reference rung, or "baseline <ref>"
    look: Look  # verdict None: still running rounds

    def text(self) -> str:
        """One line for the study page, ``ablate study show`` and the report."""
        head = f"{self.rung} vs {self.against} ({self.workload}): "
        got, n = self.look.verdict, self.look.n
        if got == INCONCLUSIVE:
            return head + (
                f"inconclusive at n={n}: the smallest change these runs could detect is "
                f"{self.look.detectable_pct:.1f}%"
            )
        if got is None:
            return head + f"undecided at n={n}, running on"
        change = f" ({self.look.change_pct:+.1f}%)" if self.look.change_pct is not None else ""
        return head + f"{got} at n={n}{change}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "text": self.text(),
            "workload": self.workload,
            "rung": self.rung,
            "against": self.against,
            "verdict": self.look.verdict,
            "n": self.look.n,
            "change_pct": self.look.change_pct,
            "detectable_pct": self.look.detectable_pct,
        }


def is_adaptive(study: Study) -> bool:
    return isinstance((study.plan or {}).get("repeats"), dict)


def design_of(study: Study) -> SequentialDesign:
    repeats = study.plan["repeats"]
    return SequentialDesign(min_n=int(repeats["min"]), max_n=int(repeats["max"]))


def _load(
    session: Session, study: Study
) -> tuple[list[Run], dict[int, float], dict[int, str], dict[int, str]]:
    runs = list(session.scalars(select(Run).where(Run.study_id == study.id)))
    values = dict(
        session.execute(
            select(RunMetric.run_id, RunMetric.value).where(
                RunMetric.run_id.in_([r.id for r in runs]), RunMetric.name == ADAPTIVE_METRIC
            )
        ).all()
    )
    variant_ids = {r.variant_id for r in runs}
    workload_ids = {r.workload_id for r in runs}
    variants = dict(
        session.execute(select(Variant.id, Variant.name).where(Variant.id.in_(variant_ids))).all()
    )
    workloads = dict(
        session.execute(select(Workload.id, Workload.name).where(Workload.id.in_(workload_ids))).all()
    )
    return runs, values, variants, workloads


def _comparisons(
    study: Study, variant_names: list[str], workload_names: list[str]
) -> list[tuple[Side, Side, str]]:
    """(contender side, reference side, label of the reference) of every comparison the study makes."""
    plan = study.plan or {}
    baseline_id = _baseline_id(study)
    out: list[tuple[Side, Side, str]] = []
    for w in workload_names:
        for i, v in enumerate(variant_names):
            if i > 0:
                out.append(
                    (
                        (study.release_id, v, w),
                        (study.release_id, variant_names[i - 1], w),
                        variant_names[i - 1],
                    )
                )
            if baseline_id is not None:
                out.append(
                    ((study.release_id, v, w), (baseline_id, v, w), f"baseline {plan.get('baseline')}")
                )
    return out


def _baseline_id(study: Study) -> int | None:
    ids = {r.release_id for r in study.runs} - {study.release_id}
    return next(iter(ids)) if ids else None


def decisions(session: Session, study: Study) -> tuple[list[Decision], dict[Side, int]]:
    """Every comparison's decision, and how many runs each side has had (any status)."""
    runs, values, variants, workloads = _load(session, study)
    by_side: dict[Side, list[tuple[int, float]]] = defaultdict(list)
    attempts: dict[Side, int] = defaultdict(int)
    for run in runs:
        side = (run.release_id, variants[run.variant_id], workloads[run.workload_id])
        attempts[side] += 1
        value = values.get(run.id)
        if run.status == RunStatus.succeeded.value and run.excluded_at is None and value is not None:
            by_side[side].append((run.repeat, value))
    ordered = {side: [v for _, v in sorted(pairs)] for side, pairs in by_side.items()}
    variant_names = _names(
        study, "variants", [variants[r.variant_id] for r in sorted(runs, key=lambda r: r.queue_order)]
    )
    workload_names = _names(study, "workloads", [workloads[r.workload_id] for r in runs])
    design = design_of(study)
    # One prior per workload for every look, from its sides' first ``min`` runs (both releases): a
    # workload's rungs share a noise level as in the release verdict's pools (sequential.study_prior).
    priors = {
        w: study_prior([v for side, v in ordered.items() if side[2] == w], design.min_n)
        for w in workload_names
    }
    out = []
    for contender, reference, label in _comparisons(study, variant_names, workload_names):
        c, r = ordered.get(contender, []), ordered.get(reference, [])
        prior = priors[contender[2]]
        got = _first_decided(design if prior is not None else design.alone(), c, r, prior)
        out.append(Decision(workload=contender[2], rung=contender[1], against=label, look=got))
    return out, dict(attempts)


def _first_decided(
    design: SequentialDesign, c: list[float], r: list[float], prior: tuple[float, float] | None
) -> Look:
    """Replay the looks from ``min`` on: the first decided one stands (the design stops there)."""
    top = min(len(c), len(r), design.max_n)
    last = Look(n=top, verdict=None, change_pct=None, detectable_pct=None)
    for n in range(design.min_n, top + 1):
        last = look(design, c[:n], r[:n], "higher", prior=prior)
        if last.decided:
            return last
    return last


def _names(study: Study, key: str, seen: list[str]) -> list[str]:
    items = (study.plan or {}).get(key)
    if isinstance(items, list) and items:
        return [i if isinstance(i, str) else str(i.get("name")) for i in items]
    return list(dict.fromkeys(seen))


def advance(session: Session, study: Study, *, queue_lock: int) -> int:
    """Queue the next round for the sides an undecided comparison needs, once no run of the study is
    queued or running; returns how many runs were queued. A study with a cancelled run is left alone
    (cancelling must not be undone by a new round). ``queue_lock``: the advisory lock that serialises
    queue_order allocation on PostgreSQL (the studies service's)."""
    if session.get_bind().dialect.name == "postgresql":
        # Taken before counting: two transactions each recording the last runs of a round would
        # otherwise each see the other's run still running, and neither queue the next round.
        # (SQLite: the transaction's flushed write already holds the database's one write lock.)
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": queue_lock})
    states = dict(
        session.execute(
            select(Run.status, func.count()).where(Run.study_id == study.id).group_by(Run.status)
        ).all()
    )
    if any(states.get(s) for s in _ACTIVE) or states.get(RunStatus.cancelled.value):
        return 0
    found, attempts = decisions(session, study)
    design = design_of(study)
    needed: set[Side] = set()
    sides = _sides(study, found)
    for decision, (contender, reference) in zip(found, sides, strict=True):
        if decision.look.verdict is None:
            needed.update(s for s in (contender, reference) if attempts.get(s, 0) < design.max_n)
    if not needed:
        return 0
    return _queue(session, study, sorted(needed), attempts, queue_lock)


def _sides(study: Study, found: list[Decision]) -> list[tuple[Side, Side]]:
    baseline_id = _baseline_id(study)
    out = []
    for d in found:
        contender = (study.release_id, d.rung, d.workload)
        if d.against.startswith("baseline ") and baseline_id is not None:
            out.append((contender, (baseline_id, d.rung, d.workload)))
        else:
            out.append((contender, (study.release_id, d.against, d.workload)))
    return out


def _queue(
    session: Session, study: Study, needed: list[Side], attempts: dict[Side, int], queue_lock: int
) -> int:
    variant_ids = dict(session.execute(select(Variant.name, Variant.id)).all())
    workload_ids = dict(session.execute(select(Workload.name, Workload.id)).all())
    next_repeat = {
        (release_id, variant_id, workload_id): top + 1
        for release_id, variant_id, workload_id, top in session.execute(
            select(Run.release_id, Run.variant_id, Run.workload_id, func.max(Run.repeat))
            .where(Run.study_id == study.id)
            .group_by(Run.release_id, Run.variant_id, Run.workload_id)
        ).all()
    }
    # Seeded by the study's seed and the round: the order is reproducible, and differs per round
    # so that no rung always runs first.
    rng = random.Random(study.order_seed * 1009 + max(attempts.values(), default=0))
    order = list(needed)
    rng.shuffle(order)
    order.sort(key=lambda s: s[2])  # each workload's rungs adjacent in time (stable: shuffled within)
    keys = (
        (release_id, variant_ids[variant], workload_ids[workload]) for release_id, variant, workload in order
    )
    # Under advance()'s lock.
    return queue_runs(session, study, ((*key, next_repeat.get(key, 0)) for key in keys))


def summary(session: Session, study: Study) -> dict[str, Any] | None:
    """What the study page, ``ablate study show`` and the comparison JSON say of an adaptive study:
    per comparison decided at n (regressed / improved / unchanged) or inconclusive with the smallest
    detectable change, and the runs the design saved against running every cell to ``max``."""
    if not is_adaptive(study):
        return None
    found, attempts = decisions(session, study)
    design = design_of(study)
    used = sum(attempts.values())
    cells = len(attempts)
    saved = max(0, cells * design.max_n - used)
    return {
        "headline": (
            f"adaptive repeats {{min: {design.min_n}, max: {design.max_n}}}: {used} runs of "
            f"{cells * design.max_n} at max, {saved} saved"
        ),
        "min": design.min_n,
        "max": design.max_n,
        "metric": ADAPTIVE_METRIC,
        "method": found[0].look.method if found else None,
        "comparisons": [d.as_dict() for d in found],
        "runs": used,
        "runs_at_max": cells * design.max_n,
        "runs_saved": saved,
        "inconclusive": sum(d.look.verdict == INCONCLUSIVE for d in found),
    }


def for_studies(session: Session, study_ids: Iterable[int | None]) -> list[dict[str, Any]]:
    """The summaries of those of these studies that are adaptive (what a release's comparison JSON and
    report say); no query without ids (a release of CI results has no study)."""
    ids = sorted({i for i in study_ids if i is not None})
    if not ids:
        return []
    out = []
    for study in session.scalars(select(Study).where(Study.id.in_(ids)).order_by(Study.id)):
        info = summary(session, study)
        if info is not None:
            out.append({"study": study.id, "name": study.name, **info})
    return out
