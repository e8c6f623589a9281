"""Preflight: the comparisons with realistic tool output, and the whole check on this (CPU) machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ablate.workers.preflight import (
    Device,
    PreflightCheck,
    check_driver,
    driver_requirements,
    parse_smi_csv,
    parse_smi_list,
    run_preflight,
    version_at_least,
    visible_subset,
)

NV_2512 = {"cuda_13.0.2": ">=580", "cuda_12.8.0": ">=575"}
SMI = """0, GPU-1a2b, 580.65.06, 81559, 80871
1, GPU-3c4d, 580.65.06, 81559, 81000
2, GPU-5e6f, 580.65.06, 81559, 1024
"""


def test_versions() -> None:
    assert version_at_least("580.65.06", "580")
    assert not version_at_least("575.57.08", "580")
    assert version_at_least("1.1.0", "1.1.0") and version_at_least("v1.4.1", "1.1.0")
    assert not version_at_least("1.0.9", "1.1.0")


def test_cuda_requirement_is_chosen_by_build() -> None:
    assert [r.minimum for r in driver_requirements(NV_2512, "gpu", "13.0.2")] == ["580"]
    assert [r.minimum for r in driver_requirements(NV_2512, "gpu", "12.8")] == ["575"]
    # unknown build: the weakest rule applies, since the release ships a build for it
    assert [r.minimum for r in driver_requirements(NV_2512, "gpu")] == ["575"]
    assert driver_requirements({"ppu_driver": ">=1.1.0"}, "ppu")[0].minimum == "1.1.0"
    assert driver_requirements({"cuda_13.0": {"driver": ">=580"}}, "gpu")[0].label == "CUDA 13.0"


def test_driver_too_old_names_the_rule() -> None:
    reqs = driver_requirements(NV_2512, "gpu", "13.0.2")
    assert (
        check_driver("575.57.08", reqs) == "driver 575.57.08 is too old: CUDA 13.0 builds need driver >= 580"
    )
    assert check_driver("580.65.06", reqs) is None
    ppu = driver_requirements({"ppu_driver": ">=1.1.0"}, "ppu")
    assert "PPU builds need driver >= 1.1.0" in str(check_driver("1.0.3", ppu))


def test_smi_parsing_and_visibility() -> None:
    devices = parse_smi_csv(SMI)
    assert [d.index for d in devices] == ["0", "1", "2"] and devices[0].driver == "580.65.06"
    assert [d.index for d in visible_subset(devices, "1,GPU-5e6f")] == ["1", "2"]
    listing = "PPU 0: PPU (UUID: GPU-019ea108-c110)\nPPU 1: PPU (UUID: GPU-019ea108-c120)\n"
    assert [(d.index, d.uuid) for d in parse_smi_list(listing)] == [("0", "GPU-019ea108-c110"),
                                                                    ("1", "GPU-019ea108-c120")]  # fmt: skip


def test_gpu_preflight_fails_on_missing_device_old_driver_or_busy_memory() -> None:
    devices = parse_smi_csv(SMI)
    ok = run_preflight(PreflightCheck("gpu", 2, NV_2512, cuda_version="13.0"), probe=lambda: devices[:2])
    assert ok.ok and ok.facts["preflight.driver"] == "580.65.06"
    few = run_preflight(PreflightCheck("gpu", 8, NV_2512), probe=lambda: devices[:2])
    assert not few.ok and "expected 8 GPU device(s) visible, found 2 (0, 1)" in str(few.reason)
    busy = run_preflight(PreflightCheck("gpu", 3, NV_2512), probe=lambda: devices)
    assert not busy.ok and "device 2 has only 1.0 of 79.6 GiB free" in str(busy.reason)
    old = [Device("0", driver="575.1", total_bytes=10, free_bytes=10)]
    assert "too old" in str(
        run_preflight(PreflightCheck("gpu", 1, NV_2512, cuda_version="13.0"), probe=lambda: old).reason
    )


def test_missing_tool_leaves_devices_unverified() -> None:
    report = run_preflight(PreflightCheck("ppu", 16, {"ppu_driver": ">=1.1.0"}), probe=lambda: None)
    assert report.ok and report.facts["preflight.devices"].startswith("unverified")


def test_cpu_preflight_really_runs_here() -> None:
    report = run_preflight(PreflightCheck("cpu", 0, {}))
    assert report.ok, report.reason
    assert float(report.facts["preflight.host_free_gib"]) > 0
    assert not run_preflight(PreflightCheck("cpu", 0, {}, min_host_free_gib=1e9)).ok


def _fake_tool(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    tool = bin_dir / name
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(0o755)


def test_a_failing_device_tool_fails_the_node_with_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a real nvidia-smi stand-in on PATH that fails like one whose driver is not loaded
    _fake_tool(
        tmp_path / "bin",
        "nvidia-smi",
        'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."\nexit 9\n',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    for mode in ("lenient", "strict"):
        report = run_preflight(PreflightCheck("gpu", 1, {}, mode=mode))
        assert not report.ok
        assert report.reason is not None and "exited with 9" in report.reason
        assert "couldn't communicate with the NVIDIA driver" in report.reason
    assert run_preflight(PreflightCheck("gpu", 1, {}, mode="off")).ok  # off: not even run


def test_a_missing_tool_fails_only_in_strict_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # neither nvidia-smi nor ppu-smi
    assert run_preflight(PreflightCheck("ppu", 16, {}, mode="lenient")).ok
    strict = run_preflight(PreflightCheck("ppu", 16, {}, mode="strict"))
    assert (
        not strict.ok and strict.reason == "`ppu-smi` is not installed on the node (ABLATE_PREFLIGHT=strict)"
    )


def test_an_old_ppu_smi_without_the_csv_query_falls_back_to_its_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_tool(
        tmp_path / "bin",
        "ppu-smi",
        'if [ "$1" = "-L" ]; then\n'
        '  echo "PPU 0: PPU-X (UUID: PPU-aa)"\n  echo "PPU 1: PPU-X (UUID: PPU-bb)"\n  exit 0\n'
        'fi\necho "unknown option $1" >&2\nexit 2\n',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    report = run_preflight(PreflightCheck("ppu", 2, {}, mode="strict"))
    assert report.ok, report.reason
    assert report.facts["preflight.devices"] == "0,1"
