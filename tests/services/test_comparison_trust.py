"""What a comparison says about its own trustworthiness: the plan's repeat warning and the demo's notes."""

from __future__ import annotations

import logging

import pytest

from ablate.backend.db.database import Database
from ablate.backend.schemas.studies import RECOMMENDED_REPEATS, StudyPlan
from ablate.backend.services import comparison as svc
from ablate.backend.services.demo import demo_plan, trust_notes
from tests.reports import seed
from tests.reports.seed import REL_2511, ReleaseSpec

PLAN = {"release": "img:1", "cluster": "c", "variants": ["Base"], "workloads": ["w"]}


def test_plans_default_to_five_repeats_and_fewer_get_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    assert RECOMMENDED_REPEATS == 5
    assert StudyPlan.model_validate(PLAN).repeats == 5 and StudyPlan.model_validate(PLAN).advisories() == []
    with caplog.at_level(logging.WARNING, logger="ablate.plans"):
        few = StudyPlan.model_validate({**PLAN, "repeats": 3})
    (message,) = few.advisories()
    # Reading a plan says nothing (the CLI reads it, then prints the server's warnings: once);
    # the server logs it when it makes the study.
    assert message.startswith("repeats=3 is below 5") and caplog.text == ""
    assert demo_plan("ablate-demo:0.1").repeats == 5  # the demo's plan file


def test_trust_notes_name_what_is_wrong(database: Database) -> None:
    seed.seed_release(database, REL_2511)
    seed.seed_release(
        database,
        ReleaseSpec("25.12", {"vllm": "0.16.0"}, repeats_of={(next(iter(seed.WORKLOADS)), "Base"): 1}),
    )
    with database.read() as s:
        c = svc.build_release_comparison(
            s, f"{seed.IMAGE}:25.12", options=svc.ComparisonOptions(n_resamples=99)
        )
    notes = trust_notes(c, (9.1, 2))
    assert notes[0] == "measured while the host was busy: load 9.1 on 2 CPUs"
    assert any(n.startswith("only 1 repeats per variant") for n in notes)
    assert any("not testable" in n for n in notes)
    assert not any("busy" in n for n in trust_notes(c, (0.5, 2)))


def test_runs_measured_on_a_busy_host_are_listed(database: Database) -> None:
    from ablate.backend.schemas.results import ResultsBatch
    from ablate.backend.services.ingest import submit_results

    def result(variant: str, repeat: int, busy: bool) -> dict:
        prov = {
            "host_busy": "true",
            "host_busy_reason": "measured while the host was busy: load 9.1 on 2 CPUs",
        }
        return {
            "release": {"image": "busy-img", "tag": "1.0", "platform": "gpu"},
            "cluster": {"name": "c1", "accelerator": "cpu", "nodes": 1, "devices_per_node": 1},
            "workload": {"name": "w"},
            "variant": {"name": variant},
            "repeat": repeat,
            "metrics": {"throughput_tokens_per_s": 100.0 + repeat},
            "provenance": prov if busy else {"host_busy": "false"},
        }

    results = [result("Base", r, busy=r == 0) for r in range(3)] + [result("X", r, False) for r in range(3)]
    with database.transaction() as session:
        submit_results(
            session,
            ResultsBatch.model_validate({"results": results}),
            token_scope="admin",
            idempotency_key=None,
        )
    with database.read() as s:
        c = svc.build_release_comparison(s, "busy-img:1.0", options=svc.ComparisonOptions(n_resamples=99))
    busy = [m for m in c.missing if "host was busy" in m]
    assert busy == ["Base on w (c1): 1 of 3 runs measured while the host was busy: load 9.1 on 2 CPUs"]
    assert busy[0] in trust_notes(c)


def _busy_release(database: Database) -> None:
    """busy-img 1.0 and 1.1, one Base cell: 1.1's last two runs were measured on a busy host, 40% slower."""
    from ablate.backend.schemas.results import ResultsBatch
    from ablate.backend.services.ingest import submit_results

    results = []
    for tag in ("1.0", "1.1"):
        for repeat in range(5):
            busy = tag == "1.1" and repeat >= 3
            prov = {"host_busy": "true", "host_busy_reason": "load 9.1 on 2 CPUs"} if busy else {}
            results.append(
                {
                    "release": {"image": "busy-img", "tag": tag, "platform": "gpu"},
                    "cluster": {"name": "c1", "accelerator": "cpu", "nodes": 1, "devices_per_node": 1},
                    "workload": {"name": "w"},
                    "variant": {"name": "Base"},
                    "repeat": repeat,
                    "metrics": {"throughput_tokens_per_s": (60.0 if busy else 100.0) + repeat * 0.1},
                    "provenance": prov,
                }
            )
    with database.transaction() as session:
        submit_results(
            session,
            ResultsBatch.model_validate({"results": results}),
            token_scope="admin",
            idempotency_key=None,
        )


def test_busy_host_runs_leave_the_verdicts_by_default_with_a_mark_and_a_switch(database: Database) -> None:
    from ablate.backend.reports.tables import verdict_text

    _busy_release(database)
    with database.read() as s:
        default = svc.build_release_comparison(
            s, "busy-img:1.1", options=svc.ComparisonOptions(n_resamples=99)
        )
        kept = svc.build_release_comparison(
            s, "busy-img:1.1", options=svc.ComparisonOptions(n_resamples=99, busy_hosts=True)
        )
    (d,) = [x for x in default.deltas if x.metric == "throughput_tokens_per_s"]
    assert d.result is not None and d.result.n_contender == 3 and d.verdict == "unchanged"
    assert d.busy_runs == 2 and not d.busy_included
    assert verdict_text(d) == "unchanged [busy host: 2 runs left out]"
    assert any(
        m.startswith("2 busy-host runs left out of the release-over-release verdicts")
        for m in default.missing
    )
    (k,) = [x for x in kept.deltas if x.metric == "throughput_tokens_per_s"]
    assert k.result is not None and k.result.n_contender == 5 and k.busy_included
    assert verdict_text(k).endswith("[busy host: 2 runs kept]")
    # The ladder and the release's own summaries keep every run.
    assert default.cells[0].succeeded == 5


def _rerun(database: Database, image: str, factors: dict[str, float], busy: bool) -> None:
    """image 1.0 on quiet hosts, 1.1 with each rung's throughput times ``factors[rung]`` (its runs
    marked busy when ``busy``): 3 rungs, 4 repeats each, CV about 1%."""
    from ablate.backend.schemas.results import ResultsBatch
    from ablate.backend.services.ingest import submit_results

    speed = {"Base": 100.0, "Base+ACCL": 130.0, "AC2+ACCL": 170.0}
    results = []
    for tag in ("1.0", "1.1"):
        for variant, base in speed.items():
            for repeat in range(4):
                marked = busy and tag == "1.1"
                factor = factors[variant] if tag == "1.1" else 1.0
                results.append(
                    {
                        "release": {"image": image, "tag": tag, "platform": "gpu"},
                        "cluster": {"name": "c1", "accelerator": "cpu", "nodes": 1, "devices_per_node": 1},
                        "workload": {"name": "w"},
                        "variant": {"name": variant},
                        "repeat": repeat,
                        "metrics": {"throughput_tokens_per_s": base * factor * (1 + (repeat - 1.5) / 100)},
                        "provenance": {"host_busy": "true", "host_busy_reason": "load 9.1 on 2 CPUs"}
                        if marked
                        else {"host_busy": "false"},
                    }
                )
    with database.transaction() as session:
        submit_results(
            session,
            ResultsBatch.model_validate({"results": results}),
            token_scope="admin",
            idempotency_key=None,
        )


def test_every_rung_slower_on_busy_hosts_says_the_environment_moved(database: Database) -> None:
    from ablate.backend.reports.markdown import render_markdown

    _rerun(database, "aa-img", {"Base": 0.6, "Base+ACCL": 0.61, "AC2+ACCL": 0.59}, busy=True)
    with database.read() as s:
        opts = svc.ComparisonOptions(n_resamples=99, busy_hosts=True)
        kept = svc.build_release_comparison(s, "aa-img:1.1", options=opts)
        default = svc.build_release_comparison(s, "aa-img:1.1", options=svc.ComparisonOptions(n_resamples=99))
    (note,) = kept.environment
    assert note.startswith(
        "w on c1, throughput_tokens_per_s: every rung moved alike: -40.0% on average over 3 rungs"
    )
    assert "12 of their runs were measured on a busy host: the environment moved, not the release" in note
    # Said whether or not the busy runs enter the verdicts (left out, the verdicts have nothing).
    assert default.environment == kept.environment
    assert kept.to_json_dict()["environment"] == [note]
    md = render_markdown(kept)
    assert md.index("## The environment may have moved") < md.index("## What is missing")


def test_a_release_that_moved_some_rungs_is_not_the_environment(database: Database) -> None:
    _rerun(database, "one-img", {"Base": 1.0, "Base+ACCL": 1.0, "AC2+ACCL": 0.8}, busy=True)
    _rerun(database, "mix-img", {"Base": 0.9, "Base+ACCL": 0.8, "AC2+ACCL": 0.7}, busy=True)
    _rerun(database, "all-img", {"Base": 0.9, "Base+ACCL": 0.9, "AC2+ACCL": 0.9}, busy=False)
    with database.read() as s:
        opts = svc.ComparisonOptions(n_resamples=99, busy_hosts=True)
        one = svc.build_release_comparison(s, "one-img:1.1", options=opts)
        mix = svc.build_release_comparison(s, "mix-img:1.1", options=opts)
        alike = svc.build_release_comparison(s, "all-img:1.1", options=opts)
    assert one.environment == () and mix.environment == ()
    # Every rung alike without busy hosts: said, but not blamed on the environment.
    (note,) = alike.environment
    assert "looks the same as one of the release" in note and "busy" not in note
