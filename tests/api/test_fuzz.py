"""Schemathesis against the live server on both databases: every operation of the OpenAPI document,
every check and every phase (examples, coverage, fuzzing, and the stateful phase, which chains
operations by the links schemathesis infers), bounded examples, a fixed seed and deterministic
generation (the same cases on every run). Pass: no 5xx; every response matches the document (status
declared, media type, headers, body schema); invalid requests refused and valid ones accepted, with
the statuses ``schemathesis.toml`` beside this file allows and says why; 405 with an exact ``Allow``;
authentication not ignored; a deleted resource gone.

The CLI runs in a subprocess against the real server (the test's own live server thread), with an
admin token so writes get past authentication and reach validation.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.conftest import make_token
from tests.api.helpers import create_release, result
from tests.support.live_server import LiveServer

ST = Path(sys.executable).with_name("st")
CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.mark.timeout(900)
def test_api_conforms_to_its_document(live_server: LiveServer, admin, ci, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if not ST.exists():
        pytest.skip("schemathesis is not installed (a dev dependency)")
    create_release(admin)
    assert ci.post("/results", json={"results": [result(), result(repeat=1)]}).status_code == 201
    token = make_token(live_server.database, "fuzz-admin", "admin")
    command = [
        str(ST),
        "--config-file",
        str(CONFIG),
        "run",
        f"{live_server.api}/openapi.json",
        "--url",
        live_server.url,
        "--header",
        f"Authorization: Bearer {token}",
        "--checks",
        "all",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        "6",
        "--seed",
        "20261203",
        "--generation-deterministic",
        "--workers",
        "1",
        "--request-timeout",
        "60",
        "--continue-on-failure",
        "--suppress-health-check",
        "all",
    ]
    # Revoking tokens (ids 1, 2, ... are tried) would revoke the fuzzer's own: that operation goes last.
    for only in ("--exclude-path-regex", "--include-path-regex"):
        run = subprocess.run(
            [*command, only, "revoke"], capture_output=True, text=True, timeout=420, cwd=tmp_path
        )
        # Long generated values are cut so the failure report stays readable.
        report = re.sub(r"(\S{200})\S+", r"\1...", run.stdout)
        assert run.returncode == 0, report[-30_000:] + run.stderr[-5_000:]
