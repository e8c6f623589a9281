"""Rungs inside their container images, through a real podman, under the real dispatcher on a local Ray.

The images are built in the tests (``podman import`` of a busybox rootfs with a benchmark script that
prints an ljperf log at the image's own speed): no registry is reachable here.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ablate.backend.db.database import Database
from ablate.backend.db.models import RunMetric
from ablate.backend.schemas.catalog import ClusterDef, ReleaseCreate, VariantDef, WorkloadDef
from ablate.backend.services.studies import cancel_study
from ablate.workers import containers
from ablate.workers.dispatch.dispatcher import Dispatcher
from tests.support import images
from tests.workers.conftest import make_settings, queue_study, runs_of

PODMAN_CPU = ClusterDef(name="cpu-podman", accelerator="cpu", container={"runtime": "podman"})
LJPERF = WorkloadDef(
    name="ljperf-in-image",
    runner="command",
    parser="regex",
    seq_len=1024,
    runner_options={
        "command": ["ljperf", "--action", "train"],
        "timeout_s": 120,
        "parser_options": {
            "patterns": [
                {
                    "regex": r"\[ljperf\] step (?P<step>\d+)/(?P<total>\d+) \| tokens/s: (?P<tps>\S+) \| ",
                    "metrics": {"tps": "throughput_tokens_per_s"},
                }
            ]
        },
    },
)


@pytest.fixture(scope="module")
def podman() -> str:
    return images.need_podman()


@pytest.fixture(scope="module")
def two_images(podman: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[str, str]]]:
    work = tmp_path_factory.mktemp("images")
    built = {
        "slow": images.build_image(podman, work, "slow", 1000.0),
        "fast": images.build_image(podman, work, "fast", 2500.0),
    }
    yield built
    images.remove_images(podman, *(ref for ref, _ in built.values()))


def test_two_rungs_in_two_images_report_each_image_s_own_speed(
    ray_local: str, database: Database, tmp_path: Path, podman: str, two_images: dict[str, tuple[str, str]]
) -> None:
    (slow, slow_id), (fast, fast_id) = two_images["slow"], two_images["fast"]
    q = queue_study(
        database,
        cluster=PODMAN_CPU,
        variants=[
            VariantDef(name="img-slow", image=slow),
            VariantDef(name="img-fast", image=fast, position=1),
        ],
        workloads=[LJPERF],
        release=ReleaseCreate(image="training-xpu-pytorch", tag="26.01", platform="ppu"),
    )
    Dispatcher(make_settings(tmp_path), database).drain(timeout_s=300)
    runs = runs_of(database, q.study_id)
    assert [r.status for r in runs] == ["succeeded", "succeeded"], [r.error for r in runs]
    with database.read() as s:
        speed = {
            r.id: s.query(RunMetric).filter_by(run_id=r.id, name="throughput_tokens_per_s").one().value
            for r in runs
        }
    for run in runs:
        want_ref, want_id = (slow, slow_id) if run.provenance["variant"] == "img-slow" else (fast, fast_id)
        assert speed[run.id] == pytest.approx(1000.0 if want_ref == slow else 2500.0)
        assert run.provenance["execution"] == "container (podman)"
        assert run.provenance["image"] == want_ref
        assert run.provenance["image_id"] == want_id  # what `podman image inspect` says
        assert run.provenance["image_pulled"].startswith("no")  # present: nothing pulled
        assert float(run.provenance["image_pull_s"]) >= 0
        image_log = tmp_path / "logs" / f"run-{run.id}" / "attempt-1" / "node0-image.log"
        assert want_id in image_log.read_text()
        assert images.containers_of_run(podman, run.id) == []  # removed after the run


def test_a_missing_image_fails_fast_naming_it_and_the_queue_goes_on(
    ray_local: str, database: Database, tmp_path: Path, podman: str, two_images: dict[str, tuple[str, str]]
) -> None:
    missing = "localhost/ablate-test:no-such-tag"
    q = queue_study(
        database,
        cluster=PODMAN_CPU,
        variants=[
            VariantDef(name="img-missing", image=missing),
            VariantDef(name="img-ok", image=two_images["slow"][0]),
        ],
        workloads=[LJPERF],
    )
    Dispatcher(make_settings(tmp_path), database).drain(timeout_s=300)
    by_variant = {
        r.provenance.get("variant") or r.provenance.get("image"): r for r in runs_of(database, q.study_id)
    }
    bad = next(r for r in runs_of(database, q.study_id) if r.status == "failed")
    assert bad.error is not None and missing in bad.error
    assert bad.failure_kind == "benchmark"  # not retried: no other node has it either
    assert bad.attempt == 1
    assert [r.status for r in by_variant.values()].count("succeeded") == 1


def test_cancel_leaves_no_container(
    ray_local: str, database: Database, tmp_path: Path, podman: str, two_images: dict[str, tuple[str, str]]
) -> None:
    slow = two_images["slow"][0]
    sleepy = VariantDef(name="img-sleepy", image=slow, env={"BENCH_SLEEP": "300"})
    q = queue_study(database, cluster=PODMAN_CPU, variants=[sleepy], workloads=[LJPERF])
    d = Dispatcher(make_settings(tmp_path), database)
    d.start()
    try:
        (run,) = runs_of(database, q.study_id)
        images.wait_until(lambda: bool(images.containers_of_run(podman, run.id)), 120, "the run's container")
        with database.transaction() as s:
            cancel_study(s, q.study_id)
        images.wait_until(
            lambda: not images.containers_of_run(podman, run.id), 120, "the container's removal"
        )
    finally:
        d.stop()
    (run,) = runs_of(database, q.study_id)
    assert run.status == "cancelled"


def test_a_killed_worker_s_orphans_are_swept_by_label(
    podman: str, two_images: dict[str, tuple[str, str]]
) -> None:
    """A container whose owner (a Ray worker) is gone is removed by the next sweep on its host; a live
    owner's is kept."""
    slow = two_images["slow"][0]
    host = containers.owner_label().split()[0]
    dead = subprocess.Popen(["true"])
    dead.wait()
    names = {"orphan": f"{host} {dead.pid} 1.00", "kept": containers.owner_label()}
    try:
        for name, owner in names.items():
            label = f"{containers.LABEL_OWNER}={owner}"
            argv = [
                podman,
                "run",
                "-d",
                "--name",
                f"ablate-test-{name}",
                "--label",
                label,
                slow,
                "sleep",
                "300",
            ]
            subprocess.run(argv, check=True, capture_output=True, timeout=120)
        removed = containers.sweep_orphans(podman)
        assert len(removed) == 1
        left = subprocess.run(
            [podman, "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True
        ).stdout
        assert "ablate-test-kept" in left and "ablate-test-orphan" not in left
    finally:
        for name in names:
            containers.remove(podman, f"ablate-test-{name}")


def test_docker_s_command_line_and_no_runtime_on_a_node() -> None:
    """docker gets its GPUs with ``--gpus '"device=i,j"'`` and loses the visible-devices variable
    inside (the devices are renumbered); podman gets CDI devices; a PPU gets the cluster's device
    files. Values travel in the client's environment, never on the command line."""
    env = {"CUDA_VISIBLE_DEVICES": "2,3", "SECRET": "s3cr3t", "NODE_RANK": "0"}
    common = {"name": "n", "labels": {"ablate.run": "7"}, "log_dir": "/logs"}
    on_gpus = containers.ContainerRun(accelerator="gpu", visible_devices_env="CUDA_VISIBLE_DEVICES", **common)
    docker = containers.launch({"runtime": "docker", "image": "reg/img:1"}, ["ljperf"], env, on_gpus)
    assert docker.argv[:2] == ["docker", "run"]
    assert docker.argv[docker.argv.index("--gpus") + 1] == '"device=2,3"'
    assert "--net=host" in docker.argv and "--ipc=host" in docker.argv
    assert "s3cr3t" not in " ".join(docker.argv) and docker.env["SECRET"] == "s3cr3t"
    assert "CUDA_VISIBLE_DEVICES" not in docker.argv
    assert docker.argv[-2:] == ["reg/img:1", "ljperf"]
    pod = containers.launch({"runtime": "podman", "image": "reg/img:1"}, ["ljperf"], env, on_gpus)
    assert [pod.argv[i + 1] for i, a in enumerate(pod.argv) if a == "--device"] == [
        "nvidia.com/gpu=2",
        "nvidia.com/gpu=3",
    ]
    ppu_container = {"runtime": "podman", "image": "reg/img:1", "device_files": ["/dev/ppu{index}"]}
    on_ppus = containers.ContainerRun(accelerator="ppu", visible_devices_env="PPU_VISIBLE_DEVICES", **common)
    ppu = containers.launch(ppu_container, ["ljperf"], {"PPU_VISIBLE_DEVICES": "8,9"}, on_ppus)
    assert [ppu.argv[i + 1] for i, a in enumerate(ppu.argv) if a == "--device"] == ["/dev/ppu8", "/dev/ppu9"]
    assert "PPU_VISIBLE_DEVICES" in ppu.argv  # passed on by name
    cfg = containers.ContainerConfig.parse({"runtime": "docker", "binary": "/nonexistent/docker"})
    with pytest.raises(containers.ContainerError) as err:
        containers.prepare_image(cfg, "reg/img:1")
    assert err.value.kind == "node" and "no container runtime" in str(err.value)
    # The docker client where no docker daemon runs (.ci/run installs the client, never a daemon):
    # this node's fault, named, so the next attempt goes elsewhere.
    import shutil

    client = shutil.which("docker")
    assert client is not None, "the docker client is missing: .ci/run installs docker.io"
    no_daemon = containers.ContainerConfig.parse({"runtime": "docker", "binary": client})
    with pytest.raises(containers.ContainerError) as err:
        containers.prepare_image(no_daemon, "reg/img:1")
    assert err.value.kind == "node" and "the docker daemon is not reachable" in str(err.value)


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"runtime": "lxc"}, "container.runtime must be one of"),
        ({"runtime": "podman", "options": ["--rm"]}, "may not contain"),
        ({"runtime": "podman", "mounts": ["data:/data"]}, "HOST_PATH:CONTAINER_PATH"),
        ({"runtime": "podman", "pull": "sometimes"}, "container.pull must be one of"),
        ({"runtime": "podman", "device_files": ["/dev/ppu0"]}, "{index}"),
        ({"runtime": "podman", "colour": "red"}, "unknown key"),
    ],
)
def test_a_bad_container_definition_is_refused_naming_the_problem(bad: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=None) as err:
        ClusterDef(name="c", accelerator="cpu", container=bad)
    assert says in str(err.value)


def test_a_two_node_run_starts_one_container_per_node(
    database: Database, db_url: str, tmp_path: Path, podman: str, two_images: dict[str, tuple[str, str]]
) -> None:
    """On a local Ray of two nodes: one container per node, NODE_RANK 0 and 1, the cluster's mounts."""
    from tests.workers.test_multinode import _drain_on

    slow, slow_id = two_images["slow"]
    out = tmp_path / "out"
    out.mkdir()
    two = ClusterDef(
        name="cpu-2x1-podman",
        accelerator="cpu",
        nodes=2,
        devices_per_node=1,
        container={"runtime": "podman", "mounts": [f"{out}:{out}"]},
    )
    q = queue_study(
        database,
        cluster=two,
        variants=[VariantDef(name="img-two-nodes", image=slow, env={"BENCH_OUT": str(out)})],
        workloads=[LJPERF],
    )
    _drain_on("two_nodes", db_url, tmp_path / "data")
    (run,) = runs_of(database, q.study_id)
    assert run.status == "succeeded", run.error
    written = sorted(p.read_text().strip() for p in out.glob("node*.txt"))
    assert written == ["node_rank=0 nnodes=2 speed=1000.0", "node_rank=1 nnodes=2 speed=1000.0"]
    assert run.provenance["node0.image_id"] == run.provenance["node1.image_id"] == slow_id
    assert run.provenance["node0.host"] and run.provenance["node1.host"]
    assert images.containers_of_run(podman, run.id) == []


def test_a_timed_out_run_leaves_no_container(
    ray_local: str, database: Database, tmp_path: Path, podman: str, two_images: dict[str, tuple[str, str]]
) -> None:
    slow = two_images["slow"][0]
    sleepy = VariantDef(
        name="img-timeout", image=slow, env={"BENCH_SLEEP": "300"}, runner_options={"timeout_s": 8}
    )
    q = queue_study(database, cluster=PODMAN_CPU, variants=[sleepy], workloads=[LJPERF])
    Dispatcher(make_settings(tmp_path), database).drain(timeout_s=300)
    (run,) = runs_of(database, q.study_id)
    assert (run.status, run.failure_kind) == ("failed", "timeout"), run.error
    assert images.containers_of_run(podman, run.id) == []  # the runner removed it by name


def test_what_a_release_s_images_hold_is_read_stored_and_checked_against_its_manifest(
    ray_local: str, database: Database, db_url: str, tmp_path: Path, podman: str
) -> None:
    """A rung's image is read on the node that ran it (versions from its files), stored by digest and
    shown beside the release's declared manifest; when the tag moves during the release, the
    comparison says so and keeps the two images apart."""
    import httpx

    from ablate.backend.services import comparison
    from tests.support.live_server import start_live_server

    versions = {"torch": "2.9.0+cu128", "vllm": "0.12.0", "libnccl.so": "2.21.5"}
    ref, first_id = images.build_image(podman, tmp_path, "moving", 1000.0, versions=versions)
    release = ReleaseCreate(
        image="localhost/ablate-test",
        tag="moving",
        platform="gpu",
        manifest={"torch": "2.9.0", "vllm": "0.11.0", "nccl": "2.21.5", "flashinfer-python": "0.5.3"},
    )
    try:
        # No image on the variant: the rung runs in its release's own image.
        q1 = queue_study(database, cluster=PODMAN_CPU, variants=[VariantDef(name="own-image")],
                         workloads=[LJPERF], repeats=2, release=release)  # fmt: skip
        Dispatcher(make_settings(tmp_path), database).drain(timeout_s=300)
        assert {r.status for r in runs_of(database, q1.study_id)} == {"succeeded"}
        server = start_live_server(db_url)
        try:
            body = httpx.get(
                f"{server.api}/images", params={"release": "localhost/ablate-test:moving"}
            ).json()
            (seen,) = body["images"]
            assert (seen["reference"], seen["image_id"]) == (ref, first_id)
            assert seen["components"]["torch"] == "2.9.0+cu128" and seen["components"]["nccl"] == "2.21.5"
            states = {c["component"]: c["state"] for c in seen["declared_vs_found"]}
            assert states == {
                "torch": "matches",
                "vllm": "differs",
                "nccl": "matches",
                "flashinfer-python": "not found",
            }
            assert body["tag_moved"] == []
            one = httpx.get(f"{server.api}/images/{seen['digest']}").json()
            assert one["files"]["torch"].endswith("torch-2.9.0+cu128.dist-info/METADATA")
            page = httpx.get(f"{server.url}/releases/localhost/ablate-test:moving", timeout=60).text
            assert "Images the runs ran in" in page and seen["digest"] in page
            assert '<tr data-state="differs"><td class="mono">vllm</td>' in page
        finally:
            server.stop()
        # The tag moves: the same reference now names another image.
        _, second_id = images.build_image(
            podman, tmp_path, "moving", 1500.0, versions={**versions, "vllm": "0.12.1"}
        )
        assert second_id != first_id
        q2 = queue_study(database, cluster=PODMAN_CPU, variants=[VariantDef(name="own-image")],
                         workloads=[LJPERF], repeats=2, release=release, seed=8)  # fmt: skip
        Dispatcher(make_settings(tmp_path), database).drain(timeout_s=300)
        assert {r.status for r in runs_of(database, q2.study_id)} == {"succeeded"}
        with database.read() as s:
            comp = comparison.build_release_comparison(s, "localhost/ablate-test:moving")
        moved = [m for m in comp.missing if "tag moved" in m]
        both = runs_of(database, q1.study_id) + runs_of(database, q2.study_id)
        assert {r.provenance["image_id"] for r in both} == {first_id, second_id}
        digests = {r.provenance.get("image_digest") or r.provenance["image_id"] for r in both}
        assert len(moved) == 1 and len(digests) == 2 and all(d in moved[0] for d in digests)
    finally:
        images.remove_images(podman, ref)


def test_release_inspect_reads_versions_from_the_image_s_files(podman: str, tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    ref, image = images.build_image(
        podman, tmp_path, "inspect", 10.0, versions={"deepspeed": "0.16.4", "libaccl.so": "1.4.1"}
    )
    try:
        cli = [sys.executable, "-m", "ablate.backend.cli.main", "release", "inspect"]
        out = subprocess.run([*cli, ref, "--json", "--no-pull"], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        body = json.loads(out.stdout)
        assert body["image_id"] == image
        assert body["components"] == {"accl": "1.4.1", "deepspeed": "0.16.4", "os": "Ablate Test OS 1.0"}
        missing = subprocess.run(
            [*cli, "localhost/none:1", "--no-pull"], capture_output=True, text=True, timeout=300
        )
        assert missing.returncode != 0 and "localhost/none:1" in missing.stderr + missing.stdout
    finally:
        images.remove_images(podman, ref)


def test_torch_llm_trains_inside_an_image_that_has_python_and_torch(
    ray_local: str, database: Database, tmp_path: Path, podman: str, two_images: dict[str, tuple[str, str]]
) -> None:
    """The built-in runner in a container: the image brings Python and torch (here this machine's, put
    into the busybox image by the cluster's mounts, read-only), Ablate's package is mounted at
    /opt/ablate; the run trains for real and reports from inside."""
    import sys

    venv = Path(sys.prefix)
    python = Path(sys.executable)
    real = python.resolve()
    mounts = [
        f"{p}:{p}:ro" for p in ("/lib", "/lib64", "/usr/lib", "/usr/local", str(venv), str(real.parents[1]))
    ]
    cluster = ClusterDef(
        name="cpu-podman-torch",
        accelerator="cpu",
        container={"runtime": "podman", "mounts": sorted(set(mounts)), "python": str(python)},
    )
    tiny = WorkloadDef(name="tiny-in-image", model="tiny", runner="torch-llm", seq_len=16, micro_batch=1,
                       precision="fp32", warmup_steps=1, measured_steps=2)  # fmt: skip
    eager = VariantDef(name="eager-in-image", image=two_images["slow"][0])
    q = queue_study(database, cluster=cluster, variants=[eager], workloads=[tiny])
    Dispatcher(make_settings(tmp_path, run_timeout_s=600.0), database).drain(timeout_s=900)
    (run,) = runs_of(database, q.study_id)
    assert run.status == "succeeded", (run.error, run.log_tail)
    assert run.provenance["execution"] == "container (podman)"
    assert run.provenance["image_id"] == two_images["slow"][1]
    with database.read() as s:
        tput = s.query(RunMetric).filter_by(run_id=run.id, name="throughput_tokens_per_s").one().value
    assert tput > 0
    assert images.containers_of_run(podman, run.id) == []


def test_the_image_s_device_tool_must_see_the_run_s_devices(podman: str, tmp_path: Path) -> None:
    """Preflight inside the image, started as the run will be: its ppu-smi must list the run's devices
    (the visible-devices variable names 8 and 9 of 16); a GPU image without nvidia-smi is unverified
    when lenient and fails the node when strict."""
    from ablate.backend.domain.runner import RunSpec
    from ablate.workers.dispatch.image_check import check_image_devices

    ref, _ = images.build_image(podman, tmp_path, "ppu-tool", 10.0, ppu_smi=True)
    try:
        ppu = RunSpec(
            run_id=90210,
            workload={},
            variant={},
            cluster={"accelerator": "ppu", "visible_devices_env": "PPU_VISIBLE_DEVICES"},
            env={"PPU_VISIBLE_DEVICES": "8,9"},
            log_dir=str(tmp_path),
            container={"runtime": "podman", "image": ref},
        )
        ok = check_image_devices(ppu, 2, "lenient")
        assert ok.ok and ok.facts["preflight.image_devices"] == "8,9"
        short = check_image_devices(ppu, 3, "lenient")
        assert (
            not short.ok and short.reason == "in the image: expected 3 PPU device(s) visible, found 2 (8, 9)"
        )
        image = {"runtime": "podman", "image": ref}
        gpu = RunSpec(90211, {}, {}, {"accelerator": "gpu"}, log_dir=str(tmp_path), container=image)
        lenient = check_image_devices(gpu, 1, "lenient")
        assert (
            lenient.ok
            and lenient.facts["preflight.image_devices"] == "unverified (nvidia-smi not in the image)"
        )
        strict = check_image_devices(gpu, 1, "strict")
        assert not strict.ok and "`nvidia-smi` is not in the image" in str(strict.reason)
        assert images.containers_of_run(podman, 90210) == images.containers_of_run(podman, 90211) == []
    finally:
        images.remove_images(podman, ref)
