"""What each event says: its Slack-compatible ``text`` and its structured fields."""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy.orm import Session

from ablate.backend.db.models import Release, Study, WebhookEvent
from ablate.backend.domain.states import StudyStatus
from ablate.backend.services.webhooks.outbox import enqueue, link

STUDY_EVENTS = {
    StudyStatus.succeeded.value: WebhookEvent.study_finished,
    StudyStatus.failed.value: WebhookEvent.study_failed,
}


def study_ended(session: Session, study: Study, counts: Counter[str]) -> list[str]:
    """A study that just reached succeeded (``study.finished``) or failed (``study.failed``); a
    cancelled one sends nothing (a person stopped it)."""
    event = STUDY_EVENTS.get(study.status)
    if event is None:
        return []
    release, cluster = study.release.ref, study.cluster.name
    total = sum(counts.values())
    url = link(f"/studies/{study.id}")
    if event is WebhookEvent.study_finished:
        outcome = f"finished: {total} run(s) succeeded"
    else:
        outcome = f"failed: {counts.get('failed', 0)} of {total} run(s) failed"
    text = f"Ablate: study {study.id} ({study.name}) {outcome}.{_slack_link(url, 'Open the study')}"
    fields: dict[str, Any] = {
        "study": {
            "id": study.id,
            "name": study.name,
            "status": study.status,
            "release": release,
            "cluster": cluster,
            "runs": dict(sorted(counts.items())),
            "created_by": study.created_by,
            "finished_at": study.finished_at.isoformat().replace("+00:00", "Z")
            if study.finished_at
            else None,
            "url": url,
        }
    }
    return enqueue(session, event, text, fields)


def _slack_link(url: str, label: str) -> str:
    """`` <url|label>`` (Slack's link syntax) for an absolute URL; nothing for a bare path
    (``ABLATE_PUBLIC_URL`` unset), which a chat could not open."""
    return f" <{url}|{label}>" if url.startswith(("http://", "https://")) else ""


def _pct(value: Any) -> str:
    return "n/a" if value is None else f"{float(value):+.2f}%"


def release_changed(
    session: Session, release: Release, baseline: str | None, cells: list[dict[str, Any]], *, resolved: bool
) -> list[str]:
    """``release.regression`` for cells newly regressed against the baseline; ``release.resolved`` for
    cells announced as regressed that no longer are."""
    event = WebhookEvent.release_resolved if resolved else WebhookEvent.release_regression
    url = link(f"/releases/{release.ref}")
    against = f" against {baseline}" if baseline else ""
    if resolved:
        head = f"Ablate: {release.ref}{against}: {len(cells)} regression(s) resolved"
        lines = [f"• {c['cluster']} / {c['workload']} / {c['variant']}: {c['metric']}" for c in cells]
    else:
        head = f"Ablate: {release.ref} regressed{against} in {len(cells)} cell(s)"
        lines = [
            f"• {c['cluster']} / {c['workload']} / {c['variant']}: {c['metric']} {_pct(c['change_pct'])} "
            f"(interval [{_pct(c['ci_low_pct'])}, {_pct(c['ci_high_pct'])}], q {c['q_value']:.3g})"
            if c.get("q_value") is not None
            else f"• {c['cluster']} / {c['workload']} / {c['variant']}: {c['metric']} {_pct(c['change_pct'])}"
            for c in cells
        ]
    text = "\n".join([f"{head}.{_slack_link(url, 'Open the release')}", *lines[:20]])
    if len(lines) > 20:
        text += f"\n… and {len(lines) - 20} more"
    fields = {"release": {"ref": release.ref, "baseline": baseline, "url": url}, "cells": cells}
    return enqueue(session, event, text, fields)
