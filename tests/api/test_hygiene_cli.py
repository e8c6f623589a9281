"""`ablate run exclude|include`, `ablate study delete`, `ablate release delete` against a live server."""

from __future__ import annotations

import os
import subprocess

import httpx

from tests.api.helpers import REF, create_release, result, snapshot
from tests.api.test_cli import ABLATE
from tests.api.test_studies import plan
from tests.support.live_server import LiveServer


def _ablate(*args: str, token: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ABLATE_")}
    env["ABLATE_TOKEN"] = token
    # stdin from /dev/null: no terminal, as in CI
    return subprocess.run(
        [ABLATE, *args], capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL
    )


def test_exclude_include_and_delete_from_the_cli(
    live_server: LiveServer,
    admin: httpx.Client,
    ci: httpx.Client,
    client: httpx.Client,
    admin_token: str,
    submit_token: str,
) -> None:
    create_release(admin)
    r = ci.post("/results", json={"results": [result(repeat=0), result(repeat=1)]})
    first, _second = r.json()["run_ids"]
    server = ("--server", live_server.url)

    done = _ablate("run", "exclude", str(first), "--reason", "throttled node", *server, token=admin_token)
    assert done.returncode == 0, done.stderr
    assert f"run {first} excluded: throttled node" in done.stdout
    assert client.get(f"/runs/{first}").json()["exclusion_reason"] == "throttled node"
    again = _ablate("run", "exclude", str(first), "--reason", "x", *server, token=admin_token)
    assert again.returncode == 1 and "409" in again.stderr and "already excluded" in again.stderr
    blank = _ablate("run", "exclude", str(first), "--reason", " ", *server, token=admin_token)
    assert blank.returncode == 1 and "reason" in blank.stderr and "blank" in blank.stderr
    denied = _ablate("run", "include", str(first), *server, token=submit_token)
    assert denied.returncode == 1 and "403" in denied.stderr
    done = _ablate("run", "include", str(first), "--reason", "node was fine", *server, token=admin_token)
    assert done.returncode == 0 and f"run {first} included again" in done.stdout, done.stderr
    assert client.get(f"/runs/{first}").json()["excluded_at"] is None

    study = admin.post("/studies", json=plan(repeats=1)).json()
    before = snapshot(live_server.database)
    # no terminal and no --yes: refused before anything is sent
    refused = _ablate("study", "delete", str(study["id"]), *server, token=admin_token)
    assert refused.returncode == 1 and "--yes" in refused.stderr and "no terminal" in refused.stderr
    # queued runs: the server's 409 names them
    active = _ablate("study", "delete", str(study["id"]), "--yes", *server, token=admin_token)
    assert active.returncode == 1 and "409" in active.stderr and "(queued)" in active.stderr
    missing = _ablate("study", "delete", "999999", "--yes", *server, token=admin_token)
    assert missing.returncode == 1 and "study 999999 does not exist" in missing.stderr
    assert snapshot(live_server.database) == before
    admin.post(f"/studies/{study['id']}/cancel")
    # a cancelled run excluded: `study show` marks it and says why
    one = study["runs"][0]["id"]
    assert admin.post(f"/runs/{one}/exclude", json={"reason": "wrong image"}).status_code == 200
    shown = _ablate("study", "show", str(study["id"]), *server, token=admin_token)
    assert shown.returncode == 0, shown.stderr
    assert "(excluded)" in shown.stdout  # the status column (rich may wrap it)
    assert "excluded from every analysis:" in shown.stdout and f"run {one} (" in shown.stdout
    assert "): wrong image" in shown.stdout
    done = _ablate("study", "delete", str(study["id"]), "--yes", *server, token=admin_token)
    assert done.returncode == 0, done.stderr
    assert f"deleted study {study['id']}: 1 studies, {len(study['runs'])} runs" in done.stdout

    refused = _ablate("release", "delete", REF, *server, token=admin_token)
    assert refused.returncode == 1 and "--yes" in refused.stderr
    done = _ablate("release", "delete", REF, "-y", *server, token=admin_token)
    assert done.returncode == 0, done.stderr
    assert f"deleted release {REF}: 1 releases, 0 studies, 2 runs, 6 run_metrics" in done.stdout
    assert client.get(f"/releases/{REF}").status_code == 404
    gone = _ablate("release", "delete", REF, "--yes", *server, token=admin_token)
    assert gone.returncode == 1 and "does not exist" in gone.stderr
    actions = [e["action"] for e in client.get("/audit").json()["items"]]
    assert actions == ["delete_release", "delete_study", "exclude_run", "include_run", "exclude_run"]
