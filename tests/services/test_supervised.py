"""The supervised loop the webhook worker and the in-process dispatcher share: a pass that raises is
counted and retried after a backoff, a pass that goes through brings the state back to running, and
stop ends the thread after its clean-up."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ablate.backend.services.supervised import FIRST_BACKOFF_S, SupervisedLoop


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.01)


class Flaky(SupervisedLoop):
    """Fails its first ``failures`` passes (a real division by zero), then counts passes."""

    def __init__(self, failures: int) -> None:
        super().__init__("test-flaky", poll_s=0.01)
        self.failures = failures
        self.passes = 0
        self.prepared = 0
        self.failed_at: list[float] = []
        self.cleaned_on: str | None = None

    def prepare(self) -> None:
        self.prepared += 1

    def step(self) -> bool:
        if self.failures > 0:
            self.failures -= 1
            self.failed_at.append(time.monotonic())
            return bool(1 // 0)
        self.passes += 1
        return False

    def cleanup(self) -> None:
        self.cleaned_on = threading.current_thread().name


def test_errors_are_retried_with_a_doubling_backoff_then_it_runs() -> None:
    loop = Flaky(failures=2)
    assert loop.loop_status().state == "stopped"
    loop.start()
    try:
        wait_for(lambda: loop.loop_status().restarts == 1, 10, "the first failure")
        status = loop.loop_status()
        assert status.state == "restarting"
        assert status.last_error == "ZeroDivisionError: integer division or modulo by zero"
        assert status.seconds_since_error is not None and status.seconds_since_error < 10
        wait_for(lambda: loop.passes >= 3, 30, "passes after the failures")
        status = loop.loop_status()
        assert status.state == "running" and status.restarts == 2
        assert loop.prepared == 3  # before the first try and before each retry
        # waited the backoff before trying again
        assert loop.failed_at[1] - loop.failed_at[0] >= FIRST_BACKOFF_S * 0.9
    finally:
        loop.stop(timeout_s=10)
    assert loop.loop_status().state == "stopped"
    assert loop.cleaned_on == "test-flaky"  # cleaned up on the loop's own thread


def test_the_backoff_doubles_between_failures() -> None:
    loop = Flaky(failures=3)
    loop.start()
    try:
        wait_for(lambda: len(loop.failed_at) == 3, 30, "three failures")
    finally:
        loop.stop(timeout_s=10)
    first, second = (b - a for a, b in zip(loop.failed_at, loop.failed_at[1:], strict=False))
    assert first >= FIRST_BACKOFF_S * 0.9 and second >= 2 * FIRST_BACKOFF_S * 0.9
    assert second > first


def test_stop_during_the_backoff_ends_the_thread_promptly() -> None:
    loop = Flaky(failures=100)
    loop.start()
    wait_for(lambda: loop.loop_status().restarts >= 1, 10, "a failure")
    began = time.monotonic()
    loop.stop(timeout_s=10)
    assert time.monotonic() - began < 5 and loop.loop_status().state == "stopped"
