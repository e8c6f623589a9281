"""Release environment rules from the release notes, applied and recorded."""

from __future__ import annotations

import pytest

from ablate.workers.envrules import plan_environment

NV = {"platform": "gpu", "manifest": {"vllm": "0.12.0"}, "notes": {}}
XPU = {"platform": "ppu", "manifest": {"transformer_engine": "1.12"}, "notes": {}}


@pytest.mark.parametrize("devices", [1, 2, 4, 8])
def test_eth0_for_up_to_eight_devices(devices: int) -> None:
    plan = plan_environment({}, NV, {"accelerator": "gpu", "devices_per_node": devices})
    assert plan.env == {"NCCL_SOCKET_IFNAME": "eth0"}
    assert plan.provenance() == {
        "env_rule.NCCL_SOCKET_IFNAME": f"eth0 (nccl-socket-ifname: {devices} device(s) per pod)"
    }


def test_hpn0_for_sixteen_devices_on_hpn() -> None:
    plan = plan_environment({}, NV, {"accelerator": "gpu", "devices_per_node": 16, "interconnect": "HPN"})
    assert plan.env["NCCL_SOCKET_IFNAME"] == "hpn0"
    assert plan.provenance()["env_rule.NCCL_SOCKET_IFNAME"].startswith("hpn0 (nccl-socket-ifname")


def test_ppu_with_transformer_engine_uses_flash_attention() -> None:
    plan = plan_environment({}, XPU, {"accelerator": "ppu", "devices_per_node": 16, "interconnect": "hpn"})
    assert plan.env == {"NCCL_SOCKET_IFNAME": "hpn0", "NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0"}


def test_te_rule_found_in_notes_text_too() -> None:
    issue = "PPU TransformerEngine cannot use FusedAttention; export NVTE_FLASH_ATTN=1"
    release = {"platform": "ppu", "manifest": {}, "notes": {"known_issues": [issue]}}
    plan = plan_environment({}, release, {"accelerator": "ppu", "devices_per_node": 8})
    assert plan.env["NVTE_FUSED_ATTN"] == "0"


def test_cpu_gets_no_nccl_rule_and_variant_env_wins_and_is_recorded() -> None:
    cpu = plan_environment({"env": {"CHECKPOINT_OPTIMIZATION": "true"}}, NV, {"accelerator": "cpu"})
    assert cpu.env == {"CHECKPOINT_OPTIMIZATION": "true"}
    gpu = plan_environment({"env": {"NCCL_SOCKET_IFNAME": "bond0"}}, NV,
                           {"accelerator": "gpu", "devices_per_node": 8})  # fmt: skip
    assert gpu.env["NCCL_SOCKET_IFNAME"] == "bond0"
    assert gpu.provenance()["env_rule.overridden_by_variant"] == "NCCL_SOCKET_IFNAME"


def test_structured_rules_from_release_notes() -> None:
    release = {"platform": "ppu", "notes": {"environment_rules": [
        "free text is ignored",
        {"name": "hggc", "set": {"HGGC_AUTO_DISPATCH_BARRIER": "0"}, "when": {"accelerator": "ppu"}},
        {"set": {"NEVER": "1"}, "when": {"accelerator": "gpu"}},
    ]}}  # fmt: skip
    plan = plan_environment({}, release, {"accelerator": "ppu", "devices_per_node": 3})
    assert plan.env == {"HGGC_AUTO_DISPATCH_BARRIER": "0"}
    assert plan.applied[0].rule == "hggc"
