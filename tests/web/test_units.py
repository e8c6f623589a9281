"""Fast checks of the dashboard's pieces without a browser: formatting, filters, error pages."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from markupsafe import escape

from ablate.backend.dashboard.errors import is_page_path
from ablate.backend.dashboard.templating import FILTERS, templates
from ablate.backend.domain import formatting as fmt
from tests.support.live_server import start_live_server


def test_pages_format_with_the_shared_formatter() -> None:
    # The number rules themselves are tested in tests/domain/test_formatting.py.
    assert FILTERS["ratio_ci"] is fmt.ratio_ci and FILTERS["num"] is fmt.num
    template = templates.env.from_string("{{ x | ratio_ci(lo, hi) }} {{ none | num(4) }} {{ p | pvalue }}")
    assert (
        template.render(x=1.2345, lo=1.181, hi=1.29, p=0.0002)
        == f"1.23\u00d7 [1.18, 1.29] {fmt.MISSING} &lt;0.001"  # autoescaped
    )


def test_api_docs_and_probes_are_not_page_paths() -> None:
    assert is_page_path("/") and is_page_path("/releases/x:1") and is_page_path("/static/x.css")
    for path in ("/api/v1/runs", "/api", "/docs", "/healthz", "/readyz", "/metrics"):
        assert not is_page_path(path), path


@pytest.fixture
def client(db_url: str) -> Iterator[httpx.Client]:
    """The real app over HTTP on each database backend (no data: these are about the plumbing)."""
    with start_live_server(db_url) as server, httpx.Client(base_url=server.url, timeout=30.0) as c:
        yield c


def test_unknown_pages_are_html_and_api_stays_problem_json(client: httpx.Client) -> None:
    page = client.get("/releases/training-nv-pytorch:99.99")
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "release &#39;training-nv-pytorch:99.99&#39; does not exist" in page.text
    assert "Traceback" not in page.text
    nowhere = client.get("/no/such/page")
    assert nowhere.status_code == 404 and "There is no page at /no/such/page" in nowhere.text
    bad = client.get("/?platform=tpu")
    assert bad.status_code == 422 and "unknown platform" in bad.text
    bad_id = client.get("/runs/not-a-number")
    assert bad_id.status_code == 422 and bad_id.headers["content-type"].startswith("text/html")
    api = client.get("/api/v1/runs/999999")
    assert api.status_code == 404 and api.headers["content-type"].startswith("application/problem+json")
    api_unknown = client.get("/api/v1/no-such-route")
    assert api_unknown.status_code == 404
    assert api_unknown.headers["content-type"].startswith("application/problem+json")
    assert client.get("/static/no-such.css").status_code == 404


def test_compare_sides_are_refused_alike_on_the_page_and_the_api(client: httpx.Client) -> None:
    """One definition of a side: the same message, as an HTML page and as problem+json."""
    cases = [
        (
            "/compare?baseline_runs=1,a&b=x:1",
            "/api/v1/compare?baseline_runs=1,a&contender=x:1",
            422,
            "'a' is not an integer",
        ),
        ("/compare?a=nope:1&b=nope:2", "/api/v1/compare?baseline=nope:1&contender=nope:2", 404, "nope:1"),
        ("/compare?baseline_study=999&b=x:1", "/api/v1/compare?baseline_study=999&contender=x:1", 404, "999"),
    ]
    for page_path, api_path, status, needle in cases:
        page, api = client.get(page_path), client.get(api_path)
        assert page.status_code == api.status_code == status, (page_path, page.status_code, api.status_code)
        assert page.headers["content-type"].startswith("text/html")
        assert api.headers["content-type"].startswith("application/problem+json")
        msg = api.json()["errors"][0]["msg"]
        assert needle in msg and str(escape(msg)) in page.text, (page_path, msg)
    # A side given no way (or two): the same rule, each naming its own parameters (a and b on the page).
    page, api = client.get("/compare?a=x:1"), client.get("/api/v1/compare?baseline=x:1")
    assert page.status_code == api.status_code == 422
    assert api.json()["errors"][0] == {
        "loc": "contender",
        "msg": "give exactly one of contender, contender_runs or contender_study",
    }
    assert "give exactly one of b, contender_runs or contender_study" in page.text


def test_plotly_comes_from_the_app_with_long_caching(client: httpx.Client) -> None:
    home = client.get("/")
    assert home.status_code == 200
    js = client.get("/vendor/plotly.min.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("application/javascript")
    assert "immutable" in js.headers["cache-control"] and len(js.content) > 1_000_000
    assert client.get("/static/ablate.css").status_code == 200
    assert client.get("/static/study.js").status_code == 200
