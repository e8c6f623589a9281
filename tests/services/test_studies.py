"""Studies: interleaved queue order, factor checks, cancel, derived status."""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import select

from ablate.backend.db.database import Database
from ablate.backend.db.models import Run, RunStatus
from ablate.backend.domain.runner import RunResult
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import ingest, studies
from ablate.backend.services.errors import NotFound, ValidationProblem
from tests.services.conftest import Catalog


def plan(c: Catalog, **overrides: object) -> StudyPlan:
    data = {"release": c.release, "cluster": c.cluster, "variants": c.variants, "workloads": c.workloads}
    return StudyPlan.model_validate({**data, "repeats": 3, "order_seed": 7, **overrides})


def test_interleaved_cells_are_round_by_round_and_reproducible() -> None:
    cells = studies.interleaved_cells(3, 2, 4, seed=11)
    assert len(cells) == 3 * 2 * 4 and len(set(cells)) == len(cells)
    # repeat r of every cell is queued before any repeat r+1
    repeats = [r for _, _, r in cells]
    assert repeats == sorted(repeats)
    assert cells == studies.interleaved_cells(3, 2, 4, seed=11)
    # the variant order is not the same in every round (seeded shuffle, not a fixed ladder order)
    orders = {tuple(v for v, w, r in cells if w == 0 and r == rep) for rep in range(4)}
    assert len(orders) > 1
    assert studies.interleaved_cells(3, 2, 4, seed=12) != cells


def test_create_study_queues_one_run_per_cell_with_increasing_order(
    database: Database, seeded: Catalog
) -> None:
    with database.transaction() as s:
        first = studies.create_study(s, plan(seeded))
        second = studies.create_study(s, plan(seeded, repeats=1, order_seed=None))
    with database.read() as s:
        runs1 = s.scalars(select(Run).where(Run.study_id == first.id).order_by(Run.queue_order)).all()
        runs2 = s.scalars(select(Run).where(Run.study_id == second.id).order_by(Run.queue_order)).all()
        assert len(runs1) == 3 * 2 * 3 and len(runs2) == 3 * 2
        assert all(r.status == "queued" and r.source == "scheduled" for r in runs1 + runs2)
        assert max(r.queue_order for r in runs1) < min(r.queue_order for r in runs2)
        assert Counter((r.variant_id, r.workload_id) for r in runs1) == Counter(
            {k: 3 for k in {(r.variant_id, r.workload_id) for r in runs1}}
        )
        assert [r.repeat for r in runs1] == sorted(r.repeat for r in runs1)
        assert first.order_seed == 7 and second.order_seed >= 0


def test_factor_the_runner_cannot_implement_is_refused_naming_variant(
    database: Database, seeded: Catalog
) -> None:
    bad = {"name": "Base+ACCL", "factors": ["accl"]}  # ACCL cannot be provided on a CPU cluster
    with pytest.raises(ValidationProblem) as err, database.transaction() as s:
        studies.create_study(s, plan(seeded, variants=[seeded.variants[0], bad]))
    assert err.value.errors[0].loc == "variants[1].factors"
    assert "Base+ACCL" in err.value.errors[0].msg and "accl" in err.value.errors[0].msg
    with database.read() as s:
        assert s.scalars(select(Run)).all() == []


def test_unknown_release_and_duplicate_variant(database: Database, seeded: Catalog) -> None:
    with pytest.raises(NotFound), database.transaction() as s:
        studies.create_study(s, plan(seeded, release="training-nv-pytorch:99.99"))
    with pytest.raises(ValidationProblem) as err, database.transaction() as s:
        studies.create_study(s, plan(seeded, variants=[seeded.variants[0], seeded.variants[0]]))
    assert err.value.errors[0].loc == "variants[1]"


def test_cancel_and_derived_status(database: Database, seeded: Catalog) -> None:
    with database.transaction() as s:
        study = studies.create_study(s, plan(seeded, repeats=1))
        runs = s.scalars(select(Run).where(Run.study_id == study.id).order_by(Run.queue_order)).all()
        runs[0].status = RunStatus.running.value
        assert studies.refresh_study_status(s, study) == "running"
        result = RunResult("succeeded", metrics={"throughput_tokens_per_s": (100.0, "tokens/s")})
        ingest.record_run_result(s, runs[1], result)
        cancelled = studies.cancel_study(s, study.id)
        assert cancelled.status == "cancelled" and cancelled.finished_at is not None
    with database.read() as s:
        statuses = Counter(s.scalars(select(Run.status).where(Run.study_id == study.id)))
    assert statuses == {"cancelled": 5, "succeeded": 1}


def test_derive_status() -> None:
    d = studies.derive_status
    assert d(Counter()) == "queued"
    assert d(Counter(queued=3)) == "queued"
    assert d(Counter(queued=1, succeeded=1)) == "running"
    assert d(Counter(succeeded=2)) == "succeeded"
    assert d(Counter(succeeded=1, failed=1)) == "failed"
    assert d(Counter(failed=1, cancelled=1)) == "cancelled"


def _second_release(database: Database) -> str:
    from ablate.backend.schemas.catalog import ReleaseCreate
    from ablate.backend.services import catalog

    with database.transaction() as s:
        catalog.create_release(s, ReleaseCreate(image="training-nv-pytorch", tag="25.11", platform="gpu"))
    return "training-nv-pytorch:25.11"


def test_a_baseline_is_re_run_beside_the_release_pair_by_pair(database: Database, seeded: Catalog) -> None:
    old = _second_release(database)
    with database.transaction() as s:
        study = studies.create_study(s, plan(seeded, baseline=old))
        runs = sorted(study.runs, key=lambda r: r.queue_order)
        matrix = studies.study_matrix(s, study)
    cells = len(seeded.variants) * len(seeded.workloads) * 3
    assert len(runs) == 2 * cells
    by_release = Counter(r["release"] for r in matrix["runs"])
    assert by_release == {seeded.release: cells, old: cells}
    # back to back: each pair is the same cell, once for each release, in a seeded order
    firsts = set()
    for a, b in zip(runs[::2], runs[1::2], strict=True):
        assert (a.variant_id, a.workload_id, a.repeat) == (b.variant_id, b.workload_id, b.repeat)
        assert a.release_id != b.release_id
        firsts.add(a.release_id)
    assert len(firsts) == 2  # neither release always goes first


def test_a_release_cannot_be_its_own_baseline(database: Database, seeded: Catalog) -> None:
    with database.transaction() as s, pytest.raises(ValidationProblem) as err:
        studies.create_study(s, plan(seeded, baseline=seeded.release))
    assert "own baseline" in str(err.value)


def test_a_variant_image_needs_a_cluster_that_runs_containers(database: Database, seeded: Catalog) -> None:
    data = plan(seeded).model_dump()
    data["variants"] = [{"name": "ac2", "image": "registry.example/ac2:26.01"}]
    with database.transaction() as s, pytest.raises(ValidationProblem) as err:
        studies.create_study(s, StudyPlan.model_validate(data))
    assert "no container runtime" in str(err.value) and "registry.example/ac2:26.01" in str(err.value)
    data["cluster"] = {"name": "cpu-podman", "accelerator": "cpu", "container": {"runtime": "podman"}}
    with database.transaction() as s:
        assert len(studies.create_study(s, StudyPlan.model_validate(data)).runs) > 0


def test_the_verdict_uses_the_same_session_baseline_and_says_so(database: Database, seeded: Catalog) -> None:
    """An old session of the baseline ran 20% faster (another day, another node); re-run beside the
    release it is as fast as the release: the comparison uses the pairs and finds no change."""
    from ablate.backend.services import comparison

    old = _second_release(database)

    def finish(study_id: int, speed: dict[str, float]) -> None:
        with database.transaction() as s:
            for run in s.scalars(select(Run).where(Run.study_id == study_id)):
                ref = f"{run.release.image}:{run.release.tag}"
                value = speed[ref] * (1 + 0.004 * run.repeat)
                result = RunResult("succeeded", metrics={"throughput_tokens_per_s": (value, "tokens/s")})
                ingest.record_run_result(s, run, result)

    small = {"variants": seeded.variants[:1], "workloads": seeded.workloads[:1]}
    with database.transaction() as s:
        earlier = studies.create_study(s, StudyPlan.model_validate({**plan(seeded).model_dump(), **small,
                                                                    "release": old})).id  # fmt: skip
    finish(earlier, {old: 1200.0})
    with database.transaction() as s:
        paired = studies.create_study(s, plan(seeded, baseline=old, **small)).id
    finish(paired, {old: 1000.0, seeded.release: 1000.0})
    with database.read() as s:
        comp = comparison.build_release_comparison(s, seeded.release, baseline_ref=old)
    assert comp.baseline_source == "same-session"
    (delta,) = [d for d in comp.deltas if d.metric == "throughput_tokens_per_s"]
    assert delta.result is not None and delta.result.n_baseline == 3  # the three paired runs, not all six
    assert delta.summary_verdict == "unchanged" and delta.result.baseline_median == pytest.approx(1004.0)
    # Both sides share the session: no between-session variance is added, and the result says so.
    assert delta.result.session_var == 0.0
    assert "same-session baseline: no between-session variance added" in delta.result.reasons


@pytest.mark.parametrize("tag_moved", [False, True])
def test_reruns_of_the_same_images_give_the_session_noise(
    database: Database, seeded: Catalog, tag_moved: bool
) -> None:
    """Five earlier releases a study each, then the release with 25.11 re-run beside it. Between the
    releases each cell also moved for real (5% a release, which inflates a release-to-release estimate);
    25.11's own session and its re-run are the same images, so their six differences are session noise
    alone and give the test against the release five back its variance. Where the re-run recorded
    other images than 25.11's own runs (its tag moved), those cells are no reruns: too few remain."""
    import numpy as np

    from ablate.backend.schemas.catalog import ReleaseCreate
    from ablate.backend.services import catalog, comparison

    rng = np.random.default_rng(32)
    tags = ["25.07", "25.08", "25.09", "25.10", "25.11"]
    with database.transaction() as s:
        for tag in tags[:-1]:
            catalog.create_release(s, ReleaseCreate(image="training-nv-pytorch", tag=tag, platform="gpu"))
    old = _second_release(database)
    level = {tag: 1 + 0.05 * rng.standard_normal(6) for tag in tags}  # real moves, release to release
    level["25.12"] = level["25.11"]

    def finish(study_id: int, digest: str, moved: bool) -> None:
        shift = np.exp(0.01 * rng.standard_normal(6))  # this session's effect on each cell
        with database.transaction() as s:
            for run in s.scalars(select(Run).where(Run.study_id == study_id)):
                cell = 2 * (run.variant.position or 0) + seeded.workloads.index(run.workload.name)
                value = 1000.0 * level[run.release.tag][cell] * shift[cell] * (1 + 0.004 * run.repeat)
                ran = "sha256:other" if moved and cell < 4 and run.release.tag == "25.11" else digest
                result = RunResult(
                    "succeeded",
                    metrics={"throughput_tokens_per_s": (value, "tokens/s")},
                    provenance={"image": f"training-nv-pytorch:{run.release.tag}", "image_digest": ran},
                )
                ingest.record_run_result(s, run, result)

    for tag in tags:
        with database.transaction() as s:
            study = studies.create_study(s, plan(seeded, release=f"training-nv-pytorch:{tag}")).id
        finish(study, f"sha256:{tag}", moved=False)
    with database.transaction() as s:
        paired = studies.create_study(s, plan(seeded, baseline=old)).id
    finish(paired, "sha256:25.11", moved=tag_moved)
    with database.read() as s:
        comp = comparison.build_release_comparison(s, seeded.release, baseline_ref=old)
    assert comp.baseline_source == "same-session"
    deltas = [d for d in comp.deltas if d.metric == "throughput_tokens_per_s"]
    assert len(deltas) == 6
    for d in deltas:
        assert d.result is not None and d.result.session_var == 0.0  # against the re-run: none
        assert d.k_back is not None and d.k_back_release == "training-nv-pytorch:25.07"
        (note,) = [x for x in d.k_back.reasons if x.startswith("between-session variance added: tau ")]
        if tag_moved:
            assert note.endswith("(24 release-to-release differences of 6 cells on cpu-1)"), note
        else:
            assert note.endswith("(6 reruns of the same images in another session, 6 cells on cpu-1)"), note
            # session noise alone (1% here), not the releases' real moves (5%) it would hold otherwise
            assert d.k_back.session_var < 2 * 0.025**2
