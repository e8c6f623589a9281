"""The progress board: a tiny actor that node tasks report progress to and the dispatcher drains.

Ray tasks cannot write to the database (workers never write SQL), and returning progress would need
the task to finish; so the runner's progress callback sends ``(step, total, throughput)`` here,
fire-and-forget, and the dispatcher takes the latest value per run on each lease tick and writes it
together with the lease renewal. A node task also says here when it started, which ends a single-node
run's placement wait (``ABLATE_PLACEMENT_TIMEOUT_S``). Best effort: a board that restarted forgets, and
the dispatcher then stops timing placements it can no longer see (see :mod:`.watch`).
"""

from __future__ import annotations


class ProgressBoard:
    def __init__(self) -> None:
        self._latest: dict[int, tuple[int, int, float | None]] = {}
        self._started: list[tuple[int, int]] = []  # (run id, attempt)

    def report(self, run_id: int, step: int, total: int, throughput: float | None) -> None:
        self._latest[run_id] = (step, total, throughput)

    def started(self, run_id: int, attempt: int) -> None:
        self._started.append((run_id, attempt))

    def take(self) -> tuple[dict[int, tuple[int, int, float | None]], list[tuple[int, int]]]:
        out, self._latest = self._latest, {}
        started, self._started = self._started, []
        return out, started
