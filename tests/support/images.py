"""Container images for the tests, built without a registry: ``podman import`` of a small rootfs
(busybox-static, a fake ``/etc/os-release``, and a benchmark script that prints a real ljperf log)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

CONF = Path(__file__).with_name("containers.conf")
REPO = "localhost/ablate-test"

# The benchmark inside the test images: an ljperf log at the image's own speed (/etc/bench-speed, or
# $BENCH_SPEED where there is no such file, e.g. the same script run on the host),
# after writing where it ran (NODE_RANK, the image's id file) under $BENCH_OUT when that is set, and
# sleeping $BENCH_SLEEP seconds first when set (a run to cancel).
LJPERF = """#!/bin/sh
speed=${BENCH_SPEED:-$(cat /etc/bench-speed)}
steps=${BENCH_STEPS:-6}
if [ -n "$BENCH_OUT" ]; then
  echo "node_rank=$NODE_RANK nnodes=$NNODES speed=$speed" > "$BENCH_OUT/node$NODE_RANK.txt"
fi
if [ -n "$BENCH_SLEEP" ]; then sleep "$BENCH_SLEEP"; fi
echo "[ljperf] model=deepspeed/llama3-8b nodes=$NNODES gpus_per_node=1"
i=1
while [ $i -le $steps ]; do
  echo "[ljperf] step $i/$steps | tokens/s: $speed | step_time: 0.100s | max_mem: 1.5GB | loss: 9.0"
  i=$((i + 1))
done
echo "[ljperf] total time: 0.6s"
"""

# A PPU node's device tool, as ``ppu-smi -L`` lists 16 devices (no CSV query, like older versions).
PPU_SMI = """#!/bin/sh
if [ "$1" = "-L" ]; then
  i=0
  while [ $i -lt 16 ]; do echo "PPU $i: PPU (UUID: PPU-0000-$i)"; i=$((i + 1)); done
  exit 0
fi
echo "ppu-smi: unknown option $1" >&2
exit 2
"""

SITE = "usr/lib/python3.11/site-packages"


def podman_env() -> None:
    """Point podman at the tests' containers.conf (the variable reaches Ray workers started later)."""
    os.environ["CONTAINERS_CONF"] = str(CONF)


def need_podman() -> str:
    """podman's path; skipped where it is missing, except in CI (where .ci/run installs it)."""
    path = shutil.which("podman")
    if path is None:
        if os.environ.get("CI"):
            raise AssertionError("podman is missing: .ci/run installs it (apt-get install podman runc)")
        pytest.skip("podman is not installed (apt-get install podman runc busybox-static)")
    podman_env()
    return path


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", mode: int = 0o644, kind: bytes = tarfile.REGTYPE,
         link: str = "") -> None:  # fmt: skip
    info = tarfile.TarInfo(name)
    info.mode, info.type, info.linkname, info.mtime = mode, kind, link, int(time.time())
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def rootfs(
    path: Path, speed: float, *, versions: dict[str, str] | None = None, ppu_smi: bool = False
) -> Path:
    """A tarball of a tiny root file system; ``versions``: python packages (dist-info METADATA) and
    shared libraries ("libnccl.so" -> "2.21.5") the image claims to hold."""
    busybox = Path(shutil.which("busybox") or "/bin/busybox").read_bytes()
    with tarfile.open(path, "w") as tar:
        for d in ("bin", "etc", "usr", "usr/local", "usr/local/bin", "usr/lib", "tmp", "dev", "proc", "sys"):
            _add(tar, d, kind=tarfile.DIRTYPE, mode=0o755)
        _add(tar, "bin/busybox", busybox, 0o755)
        for tool in ("sh", "cat", "echo", "sleep", "env", "ls", "true"):
            _add(tar, f"bin/{tool}", kind=tarfile.SYMTYPE, link="busybox", mode=0o777)
        _add(tar, "etc/os-release", b'NAME="Ablate Test OS"\nVERSION_ID="1.0"\nID=ablatetest\n')
        _add(tar, "etc/bench-speed", f"{speed}\n".encode())
        _add(tar, "usr/local/bin/ljperf", LJPERF.encode(), 0o755)
        if ppu_smi:
            _add(tar, "usr/local/bin/ppu-smi", PPU_SMI.encode(), 0o755)
        for name, version in (versions or {}).items():
            if name.startswith("lib"):
                _add(tar, f"usr/lib/{name}.{version}", b"\x7fELF", 0o755)
            else:
                meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
                _add(tar, f"{SITE}/{name.replace('-', '_')}-{version}.dist-info/METADATA", meta)
    return path


def build_image(podman: str, workdir: Path, tag: str, speed: float, **kw: Any) -> tuple[str, str]:
    """Import a test image as ``localhost/ablate-test:<tag>``; returns (reference, image id)."""
    ref = f"{REPO}:{tag}"
    tarball = rootfs(workdir / f"{tag}.tar", speed, **kw)
    subprocess.run([podman, "import", "-q", str(tarball), ref], check=True, capture_output=True, timeout=300)
    return ref, image_id(podman, ref)


def image_id(podman: str, ref: str) -> str:
    out = subprocess.run([podman, "image", "inspect", "--format", "{{.Id}}", ref], check=True,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    return "sha256:" + out.stdout.strip().removeprefix("sha256:")


def remove_images(podman: str, *refs: str) -> None:
    subprocess.run([podman, "rmi", "-f", *refs], capture_output=True, timeout=300)


def containers_of_run(podman: str, run_id: int) -> list[str]:
    out = subprocess.run([podman, "ps", "-a", "-q", "--filter", f"label=ablate.run={run_id}"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    return out.stdout.split()


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout_s:g} s: {what}")
