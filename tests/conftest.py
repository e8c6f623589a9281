"""Shared fixtures: every database test runs on SQLite and on a real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from ablate.backend.db.database import Database
from tests.support.databases import BACKENDS, DatabaseFactory, database_factory
from tests.support.images import podman_env

# podman's settings for these machines, for every process the suite starts (Ray workers included).
podman_env()

# Property tests draw the same examples on every run, so a suite that passed once passes again
# (a random draw once found a rounding case in a CI run under load, at random). To search wider:
# `pytest --hypothesis-profile=explore --hypothesis-seed=N` draws new examples for each N.
settings.register_profile("suite", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile("suite")


def pytest_configure(config: pytest.Config) -> None:
    """Under `--dist loadfile` the files go out in the order `pytest_collection_modifyitems` gives
    them, not xdist's own (largest file first): see there."""
    if getattr(config.option, "dist", "no") == "loadfile":
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In xdist workers: files with a slow test first, then by test count, largest first. The last
    file to start decides when a two-worker run ends; a slow file started late left one core idle for
    minutes. Every worker sorts the same collection the same way, as xdist requires."""
    if not hasattr(config, "workerinput"):
        return
    slow: set[str] = set()
    count: dict[str, int] = {}
    for item in items:
        path = str(item.path)
        count[path] = count.get(path, 0) + 1
        if item.get_closest_marker("slow") is not None:
            slow.add(path)
    first_seen = {path: i for i, path in enumerate(dict.fromkeys(str(it.path) for it in items))}
    items.sort(
        key=lambda it: (
            str(it.path) not in slow,
            -count[str(it.path)],
            first_seen[str(it.path)],
        )
    )


@pytest.fixture(scope="session")
def db_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DatabaseFactory]:
    with database_factory(tmp_path_factory.mktemp("databases")) as factory:
        yield factory


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(db_factory: DatabaseFactory, backend: str) -> Iterator[str]:
    """A fresh, migrated database of the parametrised backend, dropped when the test is done."""
    url = db_factory.new(backend)
    yield url
    db_factory.drop(url)


@pytest.fixture
def empty_db_url(db_factory: DatabaseFactory, backend: str) -> Iterator[str]:
    """A fresh database with no schema at all, dropped when the test is done."""
    url = db_factory.new(backend, migrated=False)
    yield url
    db_factory.drop(url)


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    db = Database.from_url(db_url)
    try:
        yield db
    finally:
        db.dispose()


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    path = Path(__file__).resolve().parent.parent / "artifacts"
    path.mkdir(exist_ok=True)
    return path


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No container of the project may outlive the suite (a cancel, timeout or test that leaves one
    behind is a bug): the run fails, listing them. Counted: containers whose owner (the Ray worker or
    process that started them) is gone, or is this process; a live owner is another suite's, running."""
    import os
    import shutil
    import subprocess

    import psutil

    podman = shutil.which("podman")
    if podman is None:
        return
    ids = subprocess.run([podman, "ps", "-a", "-q", "--filter", "label=ablate.owner"],
                         capture_output=True, text=True, timeout=120).stdout.split()  # fmt: skip
    if not ids:
        return
    fmt = '{{.Name}} {{index .Config.Labels "ablate.owner"}}'
    out = subprocess.run(
        [podman, "inspect", "--format", fmt, *ids], capture_output=True, text=True, timeout=120
    )
    left = []
    for line in out.stdout.splitlines():
        _name, _, owner = line.partition(" ")
        parts = owner.split()
        alive = len(parts) == 3 and parts[1].isdigit() and psutil.pid_exists(int(parts[1]))
        if not alive or int(parts[1]) == os.getpid():
            left.append(line)
    if left:
        print("\ncontainers of the project left behind by the suite:\n" + "\n".join(left))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
