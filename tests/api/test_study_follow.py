"""`ablate study submit --wait` against live servers that go away: a short outage is ridden out, a
long one ends with "lost contact" (exit 4, the study keeps running), and Ctrl-C says how to cancel
(or cancels, with --cancel-on-interrupt). No dispatcher runs: the study's runs stay queued."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from ablate.backend.api.app import create_app
from ablate.backend.config import Settings
from ablate.backend.db.database import Database
from ablate.backend.db.models import Study
from ablate.backend.schemas.catalog import ReleaseCreate
from ablate.backend.server import BackgroundServer, bind_socket, start_background_server
from ablate.backend.services import catalog
from tests.api.conftest import auth, make_token

ABLATE = shutil.which("ablate") or str(Path(sys.executable).with_name("ablate"))
PLAN = {
    "release": "training-nv-pytorch:25.12",
    "cluster": {"name": "cpu-follow", "accelerator": "cpu"},
    "variants": [{"name": "follow-base"}],
    "workloads": [{"name": "follow-w", "runner": "command", "runner_options": {"command": "true"}}],
    "repeats": 1,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Servers:
    """Servers of one database on one port, started and stopped at will."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self.port = _free_port()
        self.current: BackgroundServer | None = None
        self.database = Database.from_url(db_url)
        with self.database.transaction() as s:
            catalog.create_release(s, ReleaseCreate(image="training-nv-pytorch", tag="25.12", platform="gpu"))
        self.admin = make_token(self.database, "follow-admin", "admin")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        app = create_app(Settings(database_url=self.db_url), self.database, run_dispatcher=False)
        self.current = start_background_server(app, bind_socket("127.0.0.1", self.port), ready_timeout_s=30)

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop(timeout_s=15)
            self.current = None

    def study(self) -> Study | None:
        with self.database.read() as s:
            return s.scalars(select(Study).order_by(Study.id.desc())).first()


@pytest.fixture
def servers(db_url: str) -> Iterator[Servers]:
    s = Servers(db_url)
    s.start()
    yield s
    s.stop()
    s.database.dispose()


def _follow(servers: Servers, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ABLATE_")}
    env["ABLATE_TOKEN"] = servers.admin
    cmd = [ABLATE, "study", "submit", str(plan), "--wait", "--poll", "0.3", "--server", servers.url, *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _until(condition: Callable[[], object], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _queued_study(servers: Servers, proc: subprocess.Popen[str], after: int = 0) -> int:
    def newer() -> bool:
        study = servers.study()
        return study is not None and study.id > after

    _until(lambda: newer() or proc.poll() is not None, "the study")
    assert proc.poll() is None, proc.communicate()
    study = servers.study()
    assert study is not None
    time.sleep(1.0)  # a few reads of the study by the follower
    return study.id


def test_an_outage_is_ridden_out_and_a_long_one_is_lost_contact(servers: Servers, tmp_path: Path) -> None:
    proc = _follow(servers, tmp_path, "--lost-after", "30")
    study_id = _queued_study(servers, proc)
    servers.stop()
    time.sleep(2.0)  # several failed reads
    assert proc.poll() is None
    servers.start()
    with httpx.Client(base_url=f"{servers.url}/api/v1", headers=auth(servers.admin), timeout=30) as admin:
        assert admin.post(f"/studies/{study_id}/cancel").status_code == 200
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, out + err  # the study's outcome: cancelled
    assert f"study {study_id} cancelled" in out

    lost = _follow(servers, tmp_path, "--lost-after", "2")
    study_id = _queued_study(servers, lost, after=study_id)
    servers.stop()
    out, err = lost.communicate(timeout=120)
    assert lost.returncode == 4, out + err
    assert "lost contact" in err and f"study {study_id} keeps running" in err.replace("\n", " ")
    assert "Traceback" not in err
    servers.start()


@pytest.mark.parametrize("cancel", [False, True])
def test_ctrl_c_says_the_study_keeps_running_or_cancels_it(
    servers: Servers, tmp_path: Path, cancel: bool
) -> None:
    proc = _follow(servers, tmp_path, *(["--cancel-on-interrupt"] if cancel else []))
    study_id = _queued_study(servers, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    text = err.replace("\n", " ")
    study = servers.study()
    assert study is not None
    if cancel:
        assert f"interrupted: study {study_id} cancelled" in text and study.status == "cancelled"
    else:
        assert f"study {study_id} keeps running" in text and f"ablate study cancel {study_id}" in text
        assert study.status == "queued"
