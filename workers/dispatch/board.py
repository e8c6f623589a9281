"""The progress board: a tiny actor that node tasks report progress to and the dispatcher drains.

Ray tasks cannot write to the database (workers never write SQL), and returning progress would need
the task to finish; so the runner's progress callback sends ``(step, total, throughput)`` here,
fire-and-forget, and the dispatcher takes the latest value per run on each lease tick and writes it
together with the lease renewal.
"""

from __future__ import annotations


class ProgressBoard:
    def __init__(self) -> None:
        self._latest: dict[int, tuple[int, int, float | None]] = {}

    def report(self, run_id: int, step: int, total: int, throughput: float | None) -> None:
        self._latest[run_id] = (step, total, throughput)

    def take(self) -> dict[int, tuple[int, int, float | None]]:
        out, self._latest = self._latest, {}
        return out
