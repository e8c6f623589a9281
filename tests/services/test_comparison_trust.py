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
