"""A PostgreSQL server of a test's own (initdb into a fresh directory, a free port), which the test
may stop and start: for what happens to the service while its database is down. Debian's server
binaries (``/usr/lib/postgresql/*/bin``); as root, the server runs as the ``postgres`` user (initdb
refuses root)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from sqlalchemy.engine import make_url


def server_bin() -> Path | None:
    """The newest installed server's bin directory, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OwnPostgres:
    """``start()``, ``stop()``, ``url``; ``close()`` stops it and removes its directory."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.port = _free_port()
        # Not under pytest's tmp_path: the postgres user must reach the directory.
        self.dir = Path(tempfile.mkdtemp(prefix="ablate-own-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    @property
    def url(self) -> str:
        return make_url(f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres").render_as_string()

    def _run(self, tool: str, *args: str, timeout_s: float = 120) -> None:
        proc = subprocess.run(
            [*self._as_user, str(self.bin / tool), *args], capture_output=True, text=True, timeout=timeout_s
        )
        if proc.returncode != 0:
            tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed ({proc.returncode}): {proc.stderr[-2000:]}\n{tail}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "-t", "90", "start"
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "90", "stop")

    def close(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
