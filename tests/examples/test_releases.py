"""The release manifests of examples/releases/: imported through the real import path on SQLite and
PostgreSQL, faithful to their release notes, and diffed 25.01 -> 26.01 as the notes describe."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ablate.backend.analysis.manifest import diff_manifests
from ablate.backend.cli.releases import load_release_file
from ablate.backend.db.database import Database
from ablate.backend.services import catalog
from tests.examples.helpers import (
    DEMO_RELEASE,
    EXAMPLE_RELEASE_FILES,
    NV_2512,
    REAL_RELEASES,
    SEED_OF,
    SEEDS,
    XPU_2501,
    XPU_2601,
    ablate,
    load_yaml,
)

NOTE_KEYS = {"features", "fixes", "known_issues", "environment_rules"}
TOP_KEYS = {"image", "tag", "platform", "release_date", "manifest", "driver_requirements", "notes"}


@pytest.mark.parametrize("path", [*REAL_RELEASES, DEMO_RELEASE, *EXAMPLE_RELEASE_FILES], ids=lambda p: p.name)
def test_file_follows_the_schema(path: Path) -> None:
    raw = load_yaml(path)
    assert set(raw) <= TOP_KEYS
    assert isinstance(raw["tag"], str), "quote the tag: YAML reads 25.10 as a number"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in raw["manifest"].items())
    assert set(raw.get("notes") or {}) <= NOTE_KEYS
    for key, items in (raw.get("notes") or {}).items():
        assert all(isinstance(item, str) and item.strip() for item in items), f"notes.{key}: strings only"
    spec = load_release_file(path)
    assert spec.model_dump(mode="json", exclude_unset=True)["manifest"] == raw["manifest"]


def test_import_on_both_databases(db_url: str, database: Database) -> None:
    # The console script once (it starts slowly), then the functions it calls for the others.
    proc = ablate("release", "import", str(XPU_2601), "--url", db_url)
    assert proc.returncode == 0, proc.stderr
    assert "created release training-xpu-pytorch:26.01" in proc.stdout
    with database.transaction() as session:
        for path in (NV_2512, XPU_2501, XPU_2601):
            created = catalog.import_release(session, load_release_file(path)).created
            assert created is (path != XPU_2601)

    with database.read() as session:
        assert len(catalog.list_releases(session)) == 3
        assert [r.ref for r in catalog.list_releases(session, platform="ppu")] == [
            "training-xpu-pytorch:26.01",
            "training-xpu-pytorch:25.01",
        ]
        for path in REAL_RELEASES:
            raw = load_yaml(path)
            stored = catalog.get_release(session, f"{raw['image']}:{raw['tag']}")
            assert stored.platform == raw["platform"]
            assert stored.release_date is None  # none of the three notes states a date
            assert stored.manifest == raw["manifest"]
            assert stored.driver_requirements == raw["driver_requirements"]
            assert stored.notes == {key: raw["notes"].get(key, []) for key in NOTE_KEYS}


def test_versions_are_the_ones_the_notes_state() -> None:
    nv, old, new = (load_yaml(p) for p in (NV_2512, XPU_2501, XPU_2601))
    assert (nv["image"], nv["tag"], nv["platform"]) == ("training-nv-pytorch", "25.12", "gpu")
    assert nv["manifest"] == {"vllm": "0.12.0", "flashinfer-python": "0.5.3"}
    assert nv["driver_requirements"] == {"cuda_13.0.2": ">=580", "cuda_12.8.0": ">=575"}
    assert nv["notes"]["fixes"] == []  # "Bug fixes: None."

    assert (old["image"], old["tag"], old["platform"]) == ("training-xpu-pytorch", "25.01", "ppu")
    assert old["manifest"] == {
        "PPU SDK": "1.4.1",
        "ACCL-P": "1.4.0-7",
        "EIC": "1.3.7.cuda12.ppu",
        "transformer_engine": "1.12",
        "vllm": "0.6.4.post1",
    }
    assert (new["image"], new["tag"], new["platform"]) == ("training-xpu-pytorch", "26.01", "ppu")
    assert new["manifest"] == {"PPU SDK": "2.0.0", "transformer_engine": "2.8", "vllm": "0.12.0+ppu2.0.0.oe"}
    for ppu in (old, new):
        assert ppu["driver_requirements"] == {"ppu_driver": ">=1.1.0"}


def test_environment_rules_as_stated() -> None:
    nv_rules = " ".join(load_yaml(NV_2512)["notes"]["environment_rules"])
    assert "NCCL_SOCKET_IFNAME=eth0" in nv_rules and "1, 2, 4, or 8 cards" in nv_rules
    assert "NCCL_SOCKET_IFNAME=hpn0" in nv_rules and "all 16 cards" in nv_rules
    ppu = load_yaml(XPU_2501)["notes"]
    assert any("NVTE_FLASH_ATTN=1" in r and "NVTE_FUSED_ATTN=0" in r for r in ppu["environment_rules"])
    assert any("FusedAttention" in issue for issue in ppu["known_issues"])
    for path in REAL_RELEASES:
        assert any("CHECKPOINT_OPTIMIZATION=true" in r for r in load_yaml(path)["notes"]["environment_rules"])


_NUMBER = re.compile(r"\d+(?:\.\d+)*")


def _seed_text(path: Path) -> str:
    seed = SEEDS / SEED_OF[path.name]
    if not seed.exists():
        pytest.skip(f"the release notes are not beside this checkout ({seed})")
    return seed.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", REAL_RELEASES, ids=lambda p: p.name)
def test_nothing_is_invented(path: Path) -> None:
    """Every version, and every number in every note, appears in the release note it comes from."""
    seed = _seed_text(path)
    seed_numbers = set(_NUMBER.findall(seed))
    raw = load_yaml(path)
    for name, version in raw["manifest"].items():
        assert version in seed, f"manifest {name}={version} is not in {SEED_OF[path.name]}"
    for requirement in raw["driver_requirements"].values():
        assert _NUMBER.search(requirement)[0] in seed_numbers  # type: ignore[index]
    for key, items in raw["notes"].items():
        for item in items:
            invented = set(_NUMBER.findall(item)) - seed_numbers
            assert not invented, f"notes.{key}: {sorted(invented)} not in the notes: {item!r}"


def test_manifest_diff_25_01_to_26_01(database: Database) -> None:
    with database.transaction() as session:
        for path in (XPU_2501, XPU_2601):
            catalog.import_release(session, load_release_file(path))
    with database.read() as session:
        old = catalog.get_release(session, "training-xpu-pytorch:25.01").manifest
        new = catalog.get_release(session, "training-xpu-pytorch:26.01").manifest
    diff = diff_manifests(old, new)
    as_tuples = {
        kind: [(c.name, c.old, c.new) for c in getattr(diff, kind)]
        for kind in ("added", "removed", "upgraded", "downgraded", "unchanged")
    }
    assert as_tuples == {
        "added": [],
        # Not restated in the 26.01 notes (see the comment at the top of its manifest).
        "removed": [("ACCL-P", "1.4.0-7", None), ("EIC", "1.3.7.cuda12.ppu", None)],
        "upgraded": [
            ("PPU SDK", "1.4.1", "2.0.0"),
            ("transformer_engine", "1.12", "2.8"),
            ("vllm", "0.6.4.post1", "0.12.0+ppu2.0.0.oe"),
        ],
        "downgraded": [],
        "unchanged": [],
    }
