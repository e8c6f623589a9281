"""The built wheel is complete: installed into a fresh environment (no checkout on the path), it
migrates a database, serves the dashboard with its templates and static files, and runs the demo.

The wheel is built from exactly what the Docker image holds: the build context as Docker sees it
(.dockerignore applied) and, of it, what the Dockerfile's COPY lines copy. The image ran
``pip install .`` on that, so a file the package needs and the image lacks fails here."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import httpx
import pathspec
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
EXPECTED_DATA = (
    "ablate/web/templates/base.html",
    "ablate/web/templates/partials/macros.html",
    "ablate/web/static/ablate.css",
    "ablate/migrations/versions/0001_initial_schema.py",
    "ablate/migrations/script.py.mako",
    "ablate/backend/reports/templates/report.html.j2",
    "ablate/examples/demo/release.yaml",
    "ablate/examples/plans/cpu-factorial-tiny.yaml",
)


def docker_context() -> set[str]:
    """The files Docker sends as the build context: every file of the checkout git tracks or would
    track, less what .dockerignore excludes (its patterns match from the context's root)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    patterns = [
        p if p.startswith(("**", "/")) else "/" + p
        for p in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if p.strip() and not p.startswith("#")
    ]
    ignored = pathspec.PathSpec.from_lines("gitignore", patterns)
    return {f for f in listed if (ROOT / f).is_file() and not ignored.match_file(f)}


def image_sources(dest: Path) -> None:
    """Copy into ``dest`` (the image's WORKDIR) what the Dockerfile's COPY lines copy from the context:
    a file to ``target`` (into it when it ends in /), a directory's contents into ``target``."""
    context = docker_context()
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if not line.startswith("COPY "):
            continue
        *sources, target = line.split()[1:]
        for source in sources:
            files = [f for f in context if f == source or f.startswith(source.rstrip("/") + "/")]
            assert files, f"Dockerfile copies {source}, which the build context does not hold"
            for f in files:
                if f == source:
                    to = dest / target / Path(f).name if target.endswith("/") else dest / target
                else:
                    to = dest / target / Path(f).relative_to(source)
                to.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / f, to)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    image_sources(src)
    out = tmp_path_factory.mktemp("dist")
    build = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(src)]
    done = subprocess.run(build, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (found,) = out.glob("ablate-*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed; its dependencies come from the test
    environment's site-packages through a .pth line (which adds the path but, unlike a site
    directory, runs none of the .pth files there: the checkout's editable finder stays out)."""
    env = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return env


def _run(env: Path, *args: str, data_dir: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ABLATE_")}
    environ["ABLATE_DATA_DIR"] = str(data_dir)
    # From an unrelated folder: nothing of the checkout may be importable by accident.
    return subprocess.run(
        [str(env / "bin" / "ablate"), *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=data_dir,
        timeout=timeout,
    )


def test_wheel_holds_the_package_under_its_own_name_with_every_data_file(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"ablate", f"{wheel.name.split('-py3')[0]}.dist-info"}, tops
    missing = [n for n in EXPECTED_DATA if n not in names]
    assert not missing, missing
    assert not any(n.startswith("ablate/__init__") for n in names)  # ablate is a namespace of ours


def test_installed_wheel_imports_from_itself_not_from_the_checkout(installed: Path, tmp_path: Path) -> None:
    code = "import ablate.web, ablate.backend, ablate.examples as e; print(ablate.web.__file__, e.__file__)"
    out = subprocess.run(
        [installed / "bin" / "python", "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    assert str(ROOT) not in out.stdout and str(installed) in out.stdout, out.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_installed_wheel_migrates_and_serves_the_dashboard(installed: Path, tmp_path: Path) -> None:
    upgraded = _run(installed, "db", "upgrade", data_dir=tmp_path)
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    port = _free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ABLATE_")}
    environ["ABLATE_DATA_DIR"] = str(tmp_path)
    server = subprocess.Popen(
        [str(installed / "bin" / "ablate"), "serve", "--no-dispatcher", "--port", str(port)],
        cwd=tmp_path,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stdout.read() if server.stdout else ""
            try:
                if httpx.get(f"{base}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not answer /healthz within 120 s"
            time.sleep(0.5)
        home = httpx.get(f"{base}/", timeout=30)
        assert home.status_code == 200 and "Ablate" in home.text
        css = httpx.get(f"{base}/static/ablate.css", timeout=30)
        assert css.status_code == 200 and len(css.text) > 100
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.mark.slow
def test_installed_wheel_runs_the_demo(installed: Path, tmp_path: Path) -> None:
    done = _run(installed, "demo", "--no-serve", "--repeats", "1", data_dir=tmp_path, timeout=1500)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "reports" / "ablate-demo_0.1-report.html").is_file(), done.stdout


def test_installed_wheel_answers_help(installed: Path, tmp_path: Path) -> None:
    done = _run(installed, "--help", data_dir=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for command in ("serve", "dispatcher", "db", "study", "results", "report"):
        assert command in done.stdout, (command, done.stdout)


BASE_IMAGE = next(
    line.split()[1]
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines()
    if line.startswith("FROM ")
)


@pytest.mark.slow
def test_the_image_builds_and_answers_help_where_podman_holds_its_base(tmp_path: Path) -> None:
    """A real build of the Dockerfile (its own context, .dockerignore applied by podman), then
    ``ablate --help`` inside the image. No registry is reachable here: the test runs where the base
    image is already in podman's storage (``podman pull python:3.11-slim``), else it says why not."""
    from tests.support.images import podman_env

    podman = shutil.which("podman")
    if podman is None:
        pytest.skip("podman is not installed")
    podman_env()
    if subprocess.run([podman, "image", "exists", BASE_IMAGE], timeout=120).returncode != 0:
        pytest.skip(f"the base image {BASE_IMAGE} is not in podman's storage and no registry is reachable")
    tag = f"localhost/ablate-build-test:{os.getpid()}"
    try:
        built = subprocess.run(
            [podman, "build", "--pull=never", "-t", tag, "-f", str(DOCKERFILE), str(ROOT)],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
        ran = subprocess.run(
            [podman, "run", "--rm", tag, "ablate", "--help"], capture_output=True, text=True, timeout=300
        )
        assert ran.returncode == 0 and "serve" in ran.stdout, ran.stdout + ran.stderr
    finally:
        subprocess.run([podman, "rmi", "-f", tag], capture_output=True, timeout=300)
