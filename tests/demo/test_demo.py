"""`ablate demo` end to end, as a newcomer runs it: a real study on the CPUs, then a report."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from ablate.backend.db.database import Database
from ablate.backend.db.models import Release, Run, Study

ABLATE = shutil.which("ablate") or str(Path(sys.executable).with_name("ablate"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _demo(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ABLATE_DATA_DIR": str(data_dir), "ABLATE_PORT": str(_free_port())}
    env.pop("ABLATE_DATABASE_URL", None)
    return subprocess.run(
        [ABLATE, "demo", "--no-serve", *args], capture_output=True, text=True, env=env, timeout=1200
    )


@pytest.mark.slow
# Two demos of real training (24 runs, torch.compile included), each bounded at 1,200 s: the first
# alone took 9 min at load 7 (two full CI runs beside it), past the suite's 600 s default per test.
@pytest.mark.timeout(2400)
def test_demo_runs_a_real_study_writes_a_report_and_runs_again(tmp_path: Path) -> None:
    first = _demo(tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Traceback" not in first.stdout + first.stderr
    report = tmp_path / "reports" / "ablate-demo_0.1-report.html"
    assert f"report:    {report}" in first.stdout
    # It ends with what it found, and no dashboard URL that is dead once it returns (--no-serve).
    assert re.search(
        r"^headline: \+CompilerOpt\+CkptOpt is [\d.]+\u00d7 \[[\d.]+, [\d.]+\] Base's ", first.stdout, re.M
    )
    after = first.stdout[first.stdout.index("report:    ") :]
    assert "dashboard: http" not in after and "to browse it: `ablate serve`" in after
    html = report.read_text(encoding="utf-8")
    for variant in ("Base", "+CompilerOpt", "+CkptOpt", "+CompilerOpt+CkptOpt"):
        assert variant in html
    assert '<script src="http' not in html  # plotly.js inlined: the file opens offline
    # Progress as plain lines: in the log file whose path comes first, and on stdout (not a terminal here).
    log = tmp_path / "demo" / "ablate-demo_0.1.log"
    assert first.stdout.index(f"progress log: {log}") < first.stdout.index("run 1/20 done: ")
    lines = log.read_text(encoding="utf-8")
    for text in (first.stdout, lines):
        assert (
            len(re.findall(r"^(?:\S+ \S+ )?run started: ", text, re.MULTILINE)) >= 20
        )  # a retried run starts again
        done = re.findall(
            r"^(?:\S+ \S+ )?run (\d+)/20 done: .+ repeat \d \(run \d+\), [\d,]+ tokens/s$", text, re.M
        )
        assert done == [str(i) for i in range(1, 21)]
    assert f"report:    {report}" in lines
    assert "study 1: succeeded" in lines

    database = Database.from_url(f"sqlite:///{tmp_path / 'ablate.sqlite'}")
    with database.read() as s:
        runs = list(s.scalars(select(Run)))
        assert len(runs) == 20  # 4 variants x 5 repeats
        assert {r.status for r in runs} == {"succeeded"}
        by_variant = {r.variant.name: r for r in runs}
        compiled, eager = by_variant["+CompilerOpt"], by_variant["Base"]
        assert "throughput_tokens_per_s" in {m.name for m in eager.metrics}
        assert compiled.environment != {} or compiled.provenance != {}
    database.dispose()

    # A second demo gets a release of its own and compares itself against the first.
    second = _demo(tmp_path, "--repeats", "1")
    assert second.returncode == 0, second.stdout + second.stderr
    assert (tmp_path / "reports" / "ablate-demo_0.2-report.html").exists()
    database = Database.from_url(f"sqlite:///{tmp_path / 'ablate.sqlite'}")
    with database.read() as s:
        assert sorted(s.scalars(select(Release.tag))) == ["0.1", "0.2"]
        assert len(list(s.scalars(select(Study)))) == 2
    database.dispose()
