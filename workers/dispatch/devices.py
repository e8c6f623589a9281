"""Device allocations: which run attempt holds which device of which node, as rows every dispatcher shares.

Ray assigns GPU ids per task but only counts a custom resource such as ``PPU``, and an actor that hands
out indices forgets them when it restarts and is one per dispatcher. So the dispatcher that claims a run
also takes its devices, in the claim's transaction: one ``device_allocations`` row per device, under a
unique key (node, resource, index), so two dispatchers can never both take one device (the second insert
fails and its run waits). The node tasks get their indices explicitly (see :mod:`.task`).

A row's lease is renewed with its run's lease. It ends in one of two ways:

* the node task returned (its processes ended with it): the row is deleted at once;
* anything else (the task was killed, its worker or node died, the run was cancelled, its dispatcher
  stopped renewing): the row is *expired* and stays until :class:`Fence` (run by every dispatcher)
  has confirmed on the node that the attempt's processes are gone (see :mod:`.holders`), or, for a node
  Ray reports dead, until ``ABLATE_DEVICE_RELEASE_GRACE_S`` past the expiry. An expired row is never
  renewed: a hung dispatcher that wakes up cannot take its devices back.

This module, :mod:`.claims` and :mod:`.leases` are the dispatcher's only SQL besides ingest.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ablate.backend.db.base import utcnow
from ablate.backend.db.models import DeviceAllocation

log = logging.getLogger(__name__)

Attempt = tuple[int, int]  # (run id, attempt)


@dataclass(frozen=True)
class Held:
    node_id: str
    resource: str
    device_index: int
    run_id: int
    attempt: int
    live: bool  # its lease runs (a dispatcher renews it); else it waits to be confirmed free


def held(session: Session, now: datetime | None = None) -> list[Held]:
    """Every device held now (the table is as small as the fleet)."""
    now = now or utcnow()
    rows = session.execute(
        select(
            DeviceAllocation.node_id,
            DeviceAllocation.resource,
            DeviceAllocation.device_index,
            DeviceAllocation.run_id,
            DeviceAllocation.attempt,
            DeviceAllocation.lease_expires_at,
        )
    ).all()
    return [
        Held(r.node_id, r.resource, r.device_index, r.run_id, r.attempt, r.lease_expires_at >= now)
        for r in rows
    ]


@dataclass(frozen=True)
class Allocation:
    """The devices one attempt of a run takes: per node rank (position in ``nodes``), the node's id and
    the indices of ``resource`` there."""

    run_id: int
    attempt: int
    cluster_id: int | None
    resource: str
    nodes: Sequence[tuple[str, Sequence[int]]]


def take(
    session: Session,
    allocation: Allocation,
    *,
    owner: str,
    addresses: dict[str, str],
    lease_s: float,
    now: datetime | None = None,
) -> bool:
    """Take ``allocation``'s devices for ``owner`` (``addresses``: node id -> address); False, taking
    nothing, when another dispatcher took one of them first (the unique key)."""
    now = now or utcnow()
    expires = now + timedelta(seconds=lease_s)
    try:
        with session.begin_nested():
            session.add_all(
                DeviceAllocation(
                    node_id=node_id,
                    node_address=addresses.get(node_id, ""),
                    resource=allocation.resource,
                    device_index=int(index),
                    cluster_id=allocation.cluster_id,
                    run_id=allocation.run_id,
                    attempt=allocation.attempt,
                    node_rank=rank,
                    owner=owner,
                    lease_expires_at=expires,
                    created_at=now,
                )
                for rank, (node_id, indices) in enumerate(allocation.nodes)
                for index in indices
            )
            session.flush()
    except IntegrityError:
        return False
    return True


def renew(
    session: Session, owner: str, attempts: Iterable[Attempt], *, lease_s: float, now: datetime | None = None
) -> None:
    """Extend the leases of the devices of these attempts of ``owner``'s; never an expired one."""
    keys = list(attempts)
    if not keys:
        return
    now = now or utcnow()
    session.execute(
        update(DeviceAllocation)
        .where(
            DeviceAllocation.owner == owner,
            DeviceAllocation.lease_expires_at >= now,
            tuple_(DeviceAllocation.run_id, DeviceAllocation.attempt).in_(keys),
        )
        .values(lease_expires_at=now + timedelta(seconds=lease_s))
        .execution_options(synchronize_session=False)
    )


def release(session: Session, run_id: int, attempt: int, node_id: str) -> None:
    """The attempt's node task on ``node_id`` returned: its processes are gone, its devices free."""
    session.execute(
        delete(DeviceAllocation).where(
            DeviceAllocation.run_id == run_id,
            DeviceAllocation.attempt == attempt,
            DeviceAllocation.node_id == node_id,
        )
    )


def expire(session: Session, attempts: Iterable[Attempt], node_id: str | None = None) -> None:
    """The attempt was stopped or lost: its devices wait for the fence (see :class:`Fence`)."""
    keys = list(attempts)
    if not keys:
        return
    now = utcnow() - timedelta(microseconds=1)
    cond = [
        tuple_(DeviceAllocation.run_id, DeviceAllocation.attempt).in_(keys),
        DeviceAllocation.lease_expires_at > now,
    ]
    if node_id is not None:
        cond.append(DeviceAllocation.node_id == node_id)
    session.execute(
        update(DeviceAllocation)
        .where(*cond)
        .values(lease_expires_at=now)
        .execution_options(synchronize_session=False)
    )


Claim = tuple[str, int, int, str]  # (node id, run id, attempt, owner): one claim's devices on one node


def holder_id(run_id: int, attempt: int, owner: str) -> str:
    """What names one claim of a run's devices on the nodes (see :mod:`.holders`): the attempt and a
    tag of the claiming dispatcher (a run given back by a stopping dispatcher keeps its attempt)."""
    return f"{run_id}.{attempt}.{hashlib.sha1(owner.encode()).hexdigest()[:10]}"


def expired(session: Session, now: datetime | None = None) -> list[tuple[str, int, int, str, datetime]]:
    """``(node id, run id, attempt, owner, expired at)`` of every expired holding, one per node and claim."""
    now = now or utcnow()
    rows = session.execute(
        select(DeviceAllocation.node_id, DeviceAllocation.run_id, DeviceAllocation.attempt)
        .add_columns(DeviceAllocation.owner, DeviceAllocation.lease_expires_at)
        .where(DeviceAllocation.lease_expires_at < now)
    ).all()
    out: dict[Claim, datetime] = {}
    for r in rows:
        key = (r.node_id, r.run_id, r.attempt, r.owner)
        out[key] = min(out.get(key, r.lease_expires_at), r.lease_expires_at)
    return [(*k, at) for k, at in sorted(out.items())]


def release_fenced(session: Session, node_id: str, run_id: int, attempt: int, owner: str) -> int:
    """Free what the attempt held on the node once its processes there are confirmed gone (only rows
    still expired: nothing live is ever freed). Returns how many devices."""
    res = session.execute(
        delete(DeviceAllocation).where(
            DeviceAllocation.node_id == node_id,
            DeviceAllocation.run_id == run_id,
            DeviceAllocation.attempt == attempt,
            DeviceAllocation.owner == owner,
            DeviceAllocation.lease_expires_at < utcnow(),
        )
    )
    return int(res.rowcount)  # type: ignore[attr-defined]  # a DELETE's result is a CursorResult


def on_nodes(session: Session) -> dict[str, list[dict[str, Any]]]:
    """For the clusters page: node id -> the devices held there (resource, index, run, attempt, live)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for h in sorted(held(session), key=lambda h: (h.node_id, h.resource, h.device_index)):
        out.setdefault(h.node_id, []).append(
            {
                "resource": h.resource,
                "index": h.device_index,
                "run_id": h.run_id,
                "attempt": h.attempt,
                "live": h.live,
            }
        )
    return out


class Fence:
    """Frees expired holdings once the node confirms the attempt's processes are gone (a
    :func:`~ablate.workers.dispatch.holders.stop_and_confirm` task per node and attempt, in flight across
    ticks); on a node Ray reports dead, after the grace. Holdings on nodes of another Ray cluster are
    left to that cluster's dispatchers."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._probes: dict[Claim, Any] = {}
        self._remote: Any = None

    @property
    def busy(self) -> bool:
        """A probe is in flight (its answer is looked at on the next step)."""
        return bool(self._probes)

    def step(self, session: Session, nodes: dict[str, bool]) -> list[Claim]:
        """One pass (``nodes``: Ray node id -> alive); returns what it freed."""
        import ray

        freed: list[Claim] = []
        now = utcnow()
        wanted = expired(session, now)
        for node_id, run_id, attempt, owner, at in wanted:
            key = (node_id, run_id, attempt, owner)
            if node_id not in nodes:
                continue
            if not nodes[node_id]:
                if (now - at).total_seconds() >= self.grace_s:
                    release_fenced(session, *key)
                    freed.append(key)
                continue
            ref = self._probes.get(key)
            if ref is None:
                _remove_placement_group(run_id, attempt, owner)
                self._probes[key] = self._probe(node_id, holder_id(run_id, attempt, owner))
                continue
            if not ray.wait([ref], timeout=0)[0]:
                continue
            del self._probes[key]
            try:
                left = int(ray.get(ref))
            except Exception as exc:  # the node went, or the probe could not run: try again later
                log.info("device fence of run %s on node %s: %s", run_id, node_id, exc)
                continue
            if left == 0:
                release_fenced(session, *key)
                freed.append(key)
            else:
                log.warning("run %s attempt %s: %s process(es) left on %s", run_id, attempt, left, node_id)
        for key in set(self._probes) - {(n, r, a, o) for n, r, a, o, _ in wanted}:
            del self._probes[key]
        return freed

    def _probe(self, node_id: str, holder: str) -> Any:
        import ray

        from ablate.workers.dispatch.holders import stop_and_confirm

        if self._remote is None:
            self._remote = ray.remote(num_cpus=0, max_retries=0)(stop_and_confirm)
        return self._remote.options(label_selector={NODE_ID_LABEL: node_id}).remote(node_id, holder)


NODE_ID_LABEL = "ray.io/node-id"  # Ray gives every node this label


def placement_group_name(run_id: int, attempt: int, owner: str) -> str:
    """The name of a claim's placement group (unique per claim: a lost attempt's group may still exist
    when the next one is placed)."""
    return f"ablate-run-{holder_id(run_id, attempt, owner)}"


def _remove_placement_group(run_id: int, attempt: int, owner: str) -> None:
    """A lost attempt's placement group still reserves its nodes while the dispatcher that made it
    lives on (hung): remove it, by name (every dispatcher uses the same Ray namespace)."""
    from ray.util.placement_group import get_placement_group, remove_placement_group

    try:
        remove_placement_group(get_placement_group(placement_group_name(run_id, attempt, owner)))
    except Exception as exc:  # none (a run of one CPU node, or removed already)
        log.debug("placement group of run %s attempt %s: %s", run_id, attempt, exc)
