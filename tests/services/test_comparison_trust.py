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
    assert message.startswith("repeats=3 is below 5") and message in caplog.text
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
