"""What an image really holds, read from its files, without running anything inside it (a release image
need not have Python): the ``*.dist-info/METADATA`` of every site-packages directory, ``/etc/os-release``,
versioned shared libraries of the stack (NCCL/ACCL, cuDNN, cuBLAS ...) and SDK version files.

podman (as root) mounts the image and only the directories that matter are read; otherwise (docker, or
a podman that cannot mount) a container is created, never started, and its export streamed through once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.parser import HeaderParser
from typing import IO, Any

from ablate.workers.containers import ContainerConfig, ContainerError, error_text, run_client

_SITE = re.compile(r"(^|/)(site|dist)-packages/[^/]+\.dist-info/METADATA$")
_OS_RELEASE = ("etc/os-release", "usr/lib/os-release")
# Libraries whose version is part of what a training image is: collectives, CUDA/PPU runtimes, MPI.
_LIBS = {
    *("nccl", "accl", "rccl", "mpi", "ucp", "ucs", "gdrapi", "ibverbs", "nvshmem", "ppu"),
    *("cudnn", "cublas", "cublaslt", "cudart", "cufft", "curand", "cusparse", "cusolver", "nvrtc"),
    "nvjitlink",
}
_LIB = re.compile(r"(^|/)lib(?P<name>[A-Za-z0-9_+\-]+?)\.so\.(?P<version>\d+(\.\d+)+)$")
_SDK_VERSION = re.compile(r"^(usr/local|opt)/(?P<sdk>[A-Za-z0-9_\-]+)/version\.(json|txt)$")

_MAX_FILE = 1 << 20  # a METADATA or version file larger than this is not one


@dataclass
class ImageContents:
    """Components (name -> version) and the file each was read from."""

    components: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, version: str, path: str) -> None:
        name, version = name.strip().lower().replace("_", "-"), version.strip()
        if name and version and name not in self.components:
            self.components[name] = version
            self.files[name] = "/" + path.lstrip("/")

    def read(self, path: str, stream: IO[bytes]) -> None:
        """Take what ``path`` (relative to the image's root) says, if it is a file that matters."""
        path = path.lstrip("./").lstrip("/")
        if _SITE.search(path):
            headers = HeaderParser().parsestr(stream.read(_MAX_FILE).decode("utf-8", "replace"))
            if headers.get("Name") and headers.get("Version"):
                self.add(str(headers["Name"]), str(headers["Version"]), path)
        elif path in _OS_RELEASE:
            values = dict(_os_release(stream.read(_MAX_FILE).decode("utf-8", "replace")))
            name = values.get("NAME") or values.get("ID") or "linux"
            self.add("os", f"{name} {values.get('VERSION_ID', '')}".strip(), path)
        elif m := _SDK_VERSION.match(path):
            version = _sdk_version(stream.read(_MAX_FILE).decode("utf-8", "replace"))
            if version:
                self.add(m["sdk"], version, path)

    def library(self, path: str) -> None:
        """A shared library's name carries its version: ``libnccl.so.2.21.5`` -> nccl 2.21.5."""
        m = _LIB.search(path)
        if m and m["name"].lower() in _LIBS:
            current = self.components.get(m["name"].lower())
            # the longest version of a library wins (libnccl.so.2 links to libnccl.so.2.21.5)
            if current is None or len(m["version"]) > len(current):
                self.components.pop(m["name"].lower(), None)
                self.add(m["name"], m["version"], path)

    def to_dict(self) -> dict[str, Any]:
        return {
            "components": dict(sorted(self.components.items())),
            "files": dict(sorted(self.files.items())),
        }


def _os_release(text: str) -> Iterator[tuple[str, str]]:
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            yield key.strip(), value.strip().strip('"').strip("'")


def _sdk_version(text: str) -> str | None:
    with contextlib.suppress(ValueError):
        data = json.loads(text)
        if isinstance(data, dict):
            for value in data.values():  # CUDA: {"cuda": {"name": ..., "version": "12.8.0"}, ...}
                if isinstance(value, dict) and isinstance(value.get("version"), str):
                    return str(value["version"])
            if isinstance(data.get("version"), str):
                return str(data["version"])
        return None
    m = re.search(r"(\d+\.\d+(\.\d+)*)", text)
    return m.group(1) if m else None


def read_image(cfg: ContainerConfig, ref: str) -> ImageContents:
    """What image ``ref`` (present on this node) holds. Raises :class:`ContainerError`."""
    if cfg.runtime == "podman":
        root = _mount(cfg, ref)
        if root is not None:
            try:
                return _scan_tree(root)
            finally:
                run_client([cfg.client, "image", "unmount", ref], 120, node="this node")
    return _scan_export(cfg, ref)


def _mount(cfg: ContainerConfig, ref: str) -> str | None:
    proc = run_client([cfg.client, "image", "mount", ref], 300, node="this node")
    path = proc.stdout.strip()
    return path if proc.returncode == 0 and path and os.path.isdir(path) else None


def _scan_tree(root: str) -> ImageContents:
    """Walk only where the files that matter live (an image is gigabytes; its metadata is not)."""
    found = ImageContents()
    for rel in _OS_RELEASE:
        _read_file(found, root, rel)
    for base in ("usr", "opt", "root", "home"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, base)):
            rel_dir = os.path.relpath(dirpath, root)
            if rel_dir.endswith((".dist-info",)):
                if "METADATA" in filenames:
                    _read_file(found, root, os.path.join(rel_dir, "METADATA"))
                dirnames[:] = []
                continue
            if rel_dir.endswith(("site-packages", "dist-packages")):
                dirnames[:] = [d for d in dirnames if d.endswith(".dist-info")]
            for name in filenames:
                rel = os.path.join(rel_dir, name)
                if ".so." in name:
                    found.library(rel)
                elif name in ("version.json", "version.txt"):
                    _read_file(found, root, rel)
    return found


def _read_file(found: ImageContents, root: str, rel: str) -> None:
    path = os.path.join(root, rel)
    # Never follow a link out of the image (an absolute link would name the host's file).
    real = os.path.realpath(path)
    if not real.startswith(os.path.realpath(root) + os.sep) or not os.path.isfile(real):
        return
    with contextlib.suppress(OSError), open(real, "rb") as stream:
        found.read(rel, stream)


def _scan_export(cfg: ContainerConfig, ref: str) -> ImageContents:
    """Create a container (never started) and stream its file system through once."""
    create = run_client([cfg.client, "create", ref, "true"], 300, node="this node")
    if create.returncode != 0:
        raise ContainerError(
            f"image {ref}: could not create a container to read it: {error_text(create)}", "image"
        )
    cid = create.stdout.strip().splitlines()[-1]
    found = ImageContents()
    try:
        with subprocess.Popen(
            [cfg.client, "export", cid],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        ) as proc:
            assert proc.stdout is not None
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                for member in tar:
                    name = member.name.lstrip("./")
                    if member.issym() or member.islnk():
                        found.library(name)
                    elif member.isfile():
                        if ".so." in name:
                            found.library(name)
                        elif _SITE.search(name) or name in _OS_RELEASE or _SDK_VERSION.match(name):
                            stream = tar.extractfile(member)
                            if stream is not None:
                                found.read(name, stream)
    finally:
        run_client([cfg.client, "rm", "-f", cid], 120, node="this node")
    return found
