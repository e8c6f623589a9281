"""One run in flight (:class:`Execution`) and what became of it (:class:`Outcome`): plain data, no Ray calls.

The submitter fills an execution's Ray handles, the watcher moves it through its phases and turns it
into an outcome, and the recorder writes the outcome in the next recording transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ablate.backend.db.base import utcnow
from ablate.backend.domain.placement import NodeDemand, excluded_node_entries
from ablate.backend.domain.runner import RunResult, RunSpec
from ablate.workers.dispatch.spec import ExecutionSpec

TIMEOUT_GRACE_S = 300.0  # backstop beyond the runner's own timeout (start-up, queueing in Ray)
# A single-node run is a plain Ray task: Ray cannot say whether it still waits for resources or
# already holds them while its worker imports and starts (seconds on a loaded host), so its
# placement deadline gets this much on top before "not started" is called.
START_ALLOWANCE_S = 30.0


@dataclass
class Outcome:
    """What to do with a finished execution, applied in the next recording transaction."""

    run_id: int
    result: RunResult
    started_at: datetime | None
    finished_at: datetime | None
    attempt: int
    retryable: bool = False
    progress: tuple[int, int, float | None] | None = None  # the runner's last report
    excluded: dict[str, str] = field(default_factory=dict)  # nodes the next attempts avoid, and why
    images: list[dict[str, Any]] = field(default_factory=list)  # what its images hold, read on the nodes


@dataclass
class Execution:
    """A claimed run while it is in flight: its execution spec and what Ray holds of it."""

    plan: ExecutionSpec
    deadline: float  # time.monotonic() after which the watcher gives up on it
    phase: str = "running"  # multi-node: "placing" -> "rendezvous" -> "running"
    pg: Any = None  # the placement group of a multi-node run
    waiting: list[Any] = field(default_factory=list)  # Ray references not ready yet
    node_refs: list[Any] = field(default_factory=list)  # one node task per node, in node order
    node_results: dict[int, dict[str, Any]] = field(default_factory=dict)  # by node index
    # Ray nodes this run must not use (a node that died or failed preflight in an earlier attempt)
    excluded: dict[str, str] = field(default_factory=dict)
    placement_deadline: float | None = None  # time.monotonic() by which Ray has placed (or started) it
    # the devices the claim took: per node rank, (Ray node id, device indices); empty for a CPU run
    devices: list[tuple[str, list[int]]] = field(default_factory=list)
    fail_now: str = ""  # the claim says: fail it at once with this reason (waited past the deadline)
    released: set[str] = field(default_factory=set)  # nodes whose devices were handed back already

    @classmethod
    def start(
        cls,
        plan: ExecutionSpec,
        now: float,
        *,
        excluded: dict[str, str] | None = None,
        placement_timeout_s: float = 0.0,
        devices: Sequence[tuple[str, Sequence[int]]] = (),
        fail_now: str = "",
    ) -> Execution:
        """An execution claimed at ``now`` (``time.monotonic()``)."""
        return cls(
            plan,
            deadline=now + plan.timeout_s + TIMEOUT_GRACE_S,
            excluded=dict(excluded or {}),
            placement_deadline=now + placement_timeout_s if placement_timeout_s > 0 else None,
            devices=[(node, list(indices)) for node, indices in devices],
            fail_now=fail_now,
        )

    def device_ids(self, index: int) -> list[str] | None:
        """The device indices node ``index`` of this run uses (None: none were allocated)."""
        if index >= len(self.devices):
            return None
        return [str(i) for i in self.devices[index][1]]

    def exclude(self, node_id: str, reason: str) -> None:
        """Keep the next attempts of this run off ``node_id``."""
        self.excluded[node_id] = reason

    def wait_on(self, ref: Any) -> Any:
        """Note a Ray reference this execution now waits on (until the watcher sees it ready)."""
        self.waiting.append(ref)
        return ref

    @property
    def run_id(self) -> int:
        return self.plan.run_id

    @property
    def attempt(self) -> int:
        return self.plan.attempt

    @property
    def spec(self) -> RunSpec:
        return self.plan.spec

    @property
    def demand(self) -> NodeDemand:
        return self.plan.demand

    def node_facts(self) -> dict[str, str]:
        """Every node's host, Ray node id and visible devices, as ``node<N>.<fact>`` provenance keys
        (the nodes that returned: a run stopped on its first failing node may miss some)."""
        out: dict[str, str] = {}
        for index, node in sorted(self.node_results.items()):
            for fact, value in (node.get("node") or {}).items():
                if fact != "node_rank":
                    out[f"node{index}.{fact}"] = str(value)
        return out

    def outcome(self, result: RunResult, *, retryable: bool) -> Outcome:
        """The outcome of this execution ending with ``result`` (the dispatcher's provenance added; the
        run's environment when the runner reported none). Only an infrastructure failure is retried."""
        nodes = list(self.node_results.values())
        started = min((_parse_time(n.get("started_at")) for n in nodes), default=None, key=_key)
        finished = max((_parse_time(n.get("finished_at")) for n in nodes), default=None, key=_key)
        avoided = excluded_node_entries(self.excluded)
        result.provenance = {**self.plan.provenance, **avoided, **result.provenance, **self.node_facts()}
        if not result.environment:
            result.environment = dict(self.spec.env)
        lead = self.node_results.get(0, {}).get("progress")
        return Outcome(
            self.run_id,
            result,
            started,
            finished or utcnow(),
            self.attempt,
            retryable and result.failure_kind == "infrastructure",
            tuple(lead) if lead else None,
            dict(self.excluded),
            [n["image_contents"] for n in nodes if n.get("image_contents")],
        )


def _parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _key(value: datetime | None) -> float:
    return value.timestamp() if value else 0.0
