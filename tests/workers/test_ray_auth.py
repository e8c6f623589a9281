"""Ray 2.60 token authentication on a real local Ray head: the head keeps its token in ``~/.ray/auth_token``
(as the issue found it), and ``ablate dispatcher`` joining it by address fails with one line that says
which setting to set, succeeds with ``ABLATE_RAY_AUTH_TOKEN_FILE`` or ``ABLATE_RAY_AUTH_TOKEN``, and
names a wrong token, an unreadable token file and a token given twice.

Each dispatcher is its own process (Ray caches its authentication per process) with its own empty
``HOME``, so nothing of this machine's ``~/.ray`` is read.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ABLATE = shutil.which("ablate") or str(Path(sys.executable).with_name("ablate"))
RAY = str(Path(sys.executable).with_name("ray"))
TOKEN = "0123456789abcdef0123456789abcdef"


@dataclass
class Head:
    address: str
    token_file: Path  # a copy of the head's ~/.ray/auth_token, as an operator would mount it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ABLATE_", "RAY_"))}
    env["HOME"] = str(home)
    return env


def _wait_for_port(port: int, head: subprocess.Popen[str], timeout_s: float = 120.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if head.poll() is not None:
            raise AssertionError(f"the Ray head exited: {head.stdout.read() if head.stdout else ''}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the Ray head did not listen on {port} within {timeout_s} s")


@pytest.fixture(scope="module")
def head() -> Iterator[Head]:
    # A short temp dir: Ray's unix sockets live there and their paths are limited to ~107 bytes.
    root = Path(tempfile.mkdtemp(prefix="ab-rayauth-"))
    head_home = root / "head-home"
    (head_home / ".ray").mkdir(parents=True)
    (head_home / ".ray" / "auth_token").write_text(TOKEN)
    token_file = root / "token"
    token_file.write_text(TOKEN + "\n")  # as `ray get-auth-token > token` writes it
    port = _free_port()
    cmd = [RAY, "start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false"]
    cmd += [f"--temp-dir={root / 'ray'}", "--block"]
    # Its own session: the head and everything it starts are one process group, ended together below.
    proc = subprocess.Popen(
        cmd,
        env=_clean_env(head_home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for_port(port, proc)
        yield Head(f"127.0.0.1:{port}", token_file)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        _end_group(proc.pid)
        shutil.rmtree(root, ignore_errors=True)


def _end_group(pgid: int, timeout_s: float = 30.0) -> None:
    """The head's own processes (GCS, raylet) leave with it; any left after the bound are killed."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _dispatcher(head: Head, tmp_path: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = _clean_env(home)
    env.update({"ABLATE_DATA_DIR": str(tmp_path / "data"), "ABLATE_RAY_ADDRESS": head.address})
    env.update({f"ABLATE_{k.upper()}": v for k, v in settings.items()})
    return subprocess.run(
        [ABLATE, "dispatcher", "--exit-when-idle"], capture_output=True, text=True, env=env, timeout=300
    )


def _error(done: subprocess.CompletedProcess[str]) -> str:
    """The one error line (``error: ...``); Ray's own retries log above it."""
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert done.returncode == 1 and len(lines) == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return lines[0]


def test_without_the_token_the_dispatcher_says_which_setting_to_set(head: Head, tmp_path: Path) -> None:
    line = _error(_dispatcher(head, tmp_path))
    assert f"the Ray cluster at {head.address} requires token authentication" in line
    assert "InvalidAuthToken" in line and "set ABLATE_RAY_AUTH_TOKEN (or ABLATE_RAY_AUTH_TOKEN_FILE)" in line


def test_with_the_token_file_or_the_token_it_joins(head: Head, tmp_path: Path) -> None:
    for name, value in (("ray_auth_token_file", str(head.token_file)), ("ray_auth_token", TOKEN)):
        done = _dispatcher(head, tmp_path, **{name: value})
        assert done.returncode == 0, (name, done.stdout, done.stderr)
        port = head.address.rsplit(":", 1)[1]
        assert re.search(rf"dispatcher \S+ on Ray \S+:{port};", done.stdout), done.stdout  # joined the head
        assert TOKEN not in done.stdout + done.stderr  # never logged


def test_a_wrong_or_unreadable_token_is_named(head: Head, tmp_path: Path) -> None:
    line = _error(_dispatcher(head, tmp_path, ray_auth_token="not-the-token"))
    assert f"the Ray cluster at {head.address} refused the token of ABLATE_RAY_AUTH_TOKEN" in line
    assert "not-the-token" not in line
    missing = tmp_path / "nope"
    line = _error(_dispatcher(head, tmp_path, ray_auth_token_file=str(missing)))
    assert f"ABLATE_RAY_AUTH_TOKEN_FILE {missing}: cannot read it" in line
    empty = tmp_path / "empty"
    empty.write_text("\n")
    line = _error(_dispatcher(head, tmp_path, ray_auth_token_file=str(empty)))
    assert f"ABLATE_RAY_AUTH_TOKEN_FILE {empty} is empty" in line
    both = _dispatcher(head, tmp_path, ray_auth_token=TOKEN, ray_auth_token_file=str(head.token_file))
    assert "give the Ray token once: ABLATE_RAY_AUTH_TOKEN or ABLATE_RAY_AUTH_TOKEN_FILE, not both" in _error(
        both
    )


LOCAL = """
from ablate.backend.config import get_settings
from ablate.workers.dispatch.ray_runtime import ensure_ray
import os, ray
ensure_ray(get_settings())
ray.get(ray.remote(lambda: 1).remote())  # the token reaches the workers too
print("mode", os.environ["RAY_AUTH_MODE"])
ray.shutdown()
"""


def test_a_local_ray_keeps_token_auth_without_writing_home_or_warning(tmp_path: Path) -> None:
    """Left to itself Ray 2.60 wrote ~/.ray/auth_token and warned at every local start (issue 31)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ABLATE_", "RAY_"))}
    env.update(HOME=str(tmp_path), ABLATE_DATA_DIR=str(tmp_path / "data"), ABLATE_RAY_NUM_CPUS="1")
    done = subprocess.run(
        [sys.executable, "-c", LOCAL], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mode token" in done.stdout
    assert (
        "Token authentication is enabled" not in done.stderr
        and "Generated new authentication" not in done.stderr
    )
    assert not (tmp_path / ".ray").exists()
