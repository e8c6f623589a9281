"""The clusters page names each cluster's devices: kind and count per node, from the definition, its
accelerator's default (GPU, PPU) where it names no ``resource_name``; only a CPU cluster is "CPU only"."""

from __future__ import annotations

import html
import re

import httpx

from tests.api.helpers import create_release, result
from tests.support.live_server import LiveServer

X = "\u00d7"  # the page's multiplication sign

CLUSTERS = [
    {"name": "gpu-2x8", "accelerator": "gpu", "nodes": 2, "devices_per_node": 8},
    {"name": "ppu-2x16", "accelerator": "ppu", "nodes": 2, "devices_per_node": 16},
    {"name": "xpu-1x4", "accelerator": "ppu", "nodes": 1, "devices_per_node": 4, "resource_name": "XPU"},
    {"name": "cpu-box", "accelerator": "cpu", "nodes": 1, "devices_per_node": 2},
]


def _row(page: str, name: str) -> str:
    m = re.search(rf'<tr data-cluster="{re.escape(name)}">(.*?)</tr>', page, re.S)
    assert m, f"no row for cluster {name}"
    return m.group(1)


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _devices_cell(row: str) -> tuple[str, str]:
    m = re.search(r'<td data-devices="([^"]*)">(.*?)</td>', row, re.S)
    assert m, row
    return m.group(1), _text(m.group(2))


def test_devices_of_clusters_without_resource_name(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client
) -> None:
    create_release(admin)
    response = ci.post("/results", json={"results": [result(cluster=c) for c in CLUSTERS]})
    assert response.status_code == 201, response.text
    page = admin.get(f"{live_server.url}/clusters").text
    assert 'data-ray="not-connected"' in page  # the configured demand, not live resources
    cells = {c["name"]: _devices_cell(_row(page, str(c["name"]))) for c in CLUSTERS}
    assert cells == {
        "gpu-2x8": ("GPU", f"GPU {X} 8 per node the GPU default"),
        "ppu-2x16": ("PPU", f"PPU {X} 16 per node the PPU default"),
        "xpu-1x4": ("XPU", f"XPU {X} 4 per node"),
        "cpu-box": ("CPU", "CPU only"),
    }
    capacity = {c["name"]: _text(_row(page, str(c["name"]))) for c in CLUSTERS}
    assert f"2 {X} 8 GPU" in capacity["gpu-2x8"] and f"2 {X} 16 PPU" in capacity["ppu-2x16"]
    assert f"1 {X} 4 XPU" in capacity["xpu-1x4"] and f"1 {X} 2 CPU" in capacity["cpu-box"]
    assert "CPU only" not in capacity["gpu-2x8"] + capacity["ppu-2x16"]
