"""An adaptive study as its readers see it: the study JSON and page, `ablate study show`, the release
comparison JSON and the Markdown and HTML reports say per comparison decided at n or inconclusive,
and how many runs the design saved against max."""

from __future__ import annotations

import httpx

from tests.api.helpers import REF, create_release
from tests.api.test_hygiene_cli import _ablate
from tests.api.test_studies import plan
from tests.services.test_adaptive import _finish_all
from tests.support.live_server import LiveServer


def test_adaptive_outcome_is_shown_everywhere(
    live_server: LiveServer, admin: httpx.Client, client: httpx.Client, admin_token: str
) -> None:
    create_release(admin)
    r = admin.post("/studies", json=plan(repeats={"min": 2, "max": 4}, order_seed=5))
    assert r.status_code == 201, r.text
    study = r.json()
    assert len(study["runs"]) == 3 * 2 and study["repeats"] == 4
    assert study["adaptive"]["runs_saved"] == 3 * 4 - 6  # nothing decided yet: nothing queued beyond min
    assert all(c["verdict"] is None for c in study["adaptive"]["comparisons"])
    base, faster, same = study["variants"]
    _finish_all(live_server.database, study["id"], {base: 1.0, faster: 1.3, same: 1.3}, cv=0.003)

    shown = client.get(f"/studies/{study['id']}").json()
    info = shown["adaptive"]
    assert shown["status"] == "succeeded" and info["runs"] == 6 and info["runs_saved"] == 6
    texts = [c["text"] for c in info["comparisons"]]
    assert any(t.startswith(f"{faster} vs {base} (tiny): improved at n=2 (+") for t in texts), texts
    assert f"{same} vs {faster} (tiny): unchanged at n=2" in " ".join(texts)
    headline = "adaptive repeats {min: 2, max: 4}: 6 runs of 12 at max, 6 saved"
    assert info["headline"] == headline

    cli = _ablate("study", "show", str(study["id"]), "--server", live_server.url, token=admin_token)
    assert cli.returncode == 0, cli.stderr
    assert headline in cli.stdout and f"{faster} vs {base} (tiny): improved at n=2" in cli.stdout

    page = httpx.get(f"{live_server.url}/studies/{study['id']}", timeout=30)
    assert page.status_code == 200 and 'id="study-adaptive"' in page.text and headline in page.text

    comparison = client.get(f"/releases/{REF}/comparison").json()
    (entry,) = comparison["adaptive"]
    assert entry["study"] == study["id"] and entry["runs_saved"] == 6
    markdown = client.get(f"/releases/{REF}/report", params={"format": "md"}).text
    assert "## Adaptive repeats" in markdown and headline in markdown
    html = client.get(f"/releases/{REF}/report", params={"format": "html"}).text
    assert 'id="adaptive"' in html and "improved at n=2" in html


def test_a_fixed_study_has_no_adaptive_section(live_server: LiveServer, admin: httpx.Client) -> None:
    create_release(admin)
    study = admin.post("/studies", json=plan(repeats=2)).json()
    assert study["adaptive"] is None
    assert admin.get(f"/releases/{REF}/comparison").json()["adaptive"] == []
