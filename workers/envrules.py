"""The environment a run executes with: release rules from the release notes, then the variant's own.

Rules come from two places:

- built in, taken from the release notes in ``shared/seeds``: ``NCCL_SOCKET_IFNAME`` must be ``eth0``
  when a pod uses 1, 2, 4 or 8 devices and ``hpn0`` when it uses all 16 of a machine on an HPN
  network; on PPU the TransformerEngine cannot use FusedAttention, so ``NVTE_FLASH_ATTN=1
  NVTE_FUSED_ATTN=0``;
- structured entries of ``release.notes["environment_rules"]`` (free-text entries are ignored), e.g.
  ``{"set": {"FOO": "1"}, "when": {"accelerator": "ppu", "devices_per_node": [8, 16]}}``.

The variant's env is applied last: a variant that sets a variable on purpose (that is what it
measures) wins, and the override is recorded. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ETH_DEVICE_COUNTS = frozenset({1, 2, 4, 8})
HPN_DEVICE_COUNT = 16


@dataclass(frozen=True)
class AppliedRule:
    rule: str
    variable: str
    value: str
    reason: str


@dataclass
class EnvPlan:
    env: dict[str, str] = field(default_factory=dict)
    applied: list[AppliedRule] = field(default_factory=list)
    overridden: list[str] = field(default_factory=list)  # rule variables the variant set itself

    def provenance(self) -> dict[str, str]:
        """Flat strings for ``Run.provenance``: which rules set what, and why."""
        out = {f"env_rule.{r.variable}": f"{r.value} ({r.rule}: {r.reason})" for r in self.applied}
        if self.overridden:
            out["env_rule.overridden_by_variant"] = ",".join(sorted(self.overridden))
        return out


def _is_hpn(cluster: Mapping[str, Any]) -> bool:
    return "hpn" in str(cluster.get("interconnect") or "").lower()


def _has_transformer_engine(release: Mapping[str, Any]) -> bool:
    manifest = release.get("manifest") or {}
    keys = {str(k).lower().replace("-", "_") for k in manifest}
    if keys & {"transformer_engine", "transformerengine", "te"}:
        return True
    notes = release.get("notes") or {}
    text = " ".join(str(x) for v in notes.values() if isinstance(v, list) for x in v).lower()
    return "transformerengine" in text.replace(" ", "").replace("_", "") or "nvte_" in text


def builtin_rules(release: Mapping[str, Any], cluster: Mapping[str, Any]) -> list[AppliedRule]:
    acc = str(cluster.get("accelerator") or "cpu").lower()
    devices = int(cluster.get("devices_per_node") or 0)
    rules: list[AppliedRule] = []
    if acc in ("gpu", "ppu"):
        # The collectives library (NCCL or the NCCL-compatible ACCL) picks its socket by this name.
        if devices in ETH_DEVICE_COUNTS:
            rules.append(
                AppliedRule(
                    "nccl-socket-ifname", "NCCL_SOCKET_IFNAME", "eth0", f"{devices} device(s) per pod"
                )
            )
        elif devices == HPN_DEVICE_COUNT and _is_hpn(cluster):
            rules.append(
                AppliedRule(
                    "nccl-socket-ifname",
                    "NCCL_SOCKET_IFNAME",
                    "hpn0",
                    "all 16 devices of a machine on an HPN network",
                )
            )
        elif devices == HPN_DEVICE_COUNT:
            rules.append(
                AppliedRule(
                    "nccl-socket-ifname",
                    "NCCL_SOCKET_IFNAME",
                    "eth0",
                    "16 devices per pod without an HPN interconnect",
                )
            )
    if acc == "ppu" and _has_transformer_engine(release):
        why = "PPU cuDNN lacks FMA, so TransformerEngine must use FlashAttention, not FusedAttention"
        rules.append(AppliedRule("ppu-te-flash-attn", "NVTE_FLASH_ATTN", "1", why))
        rules.append(AppliedRule("ppu-te-flash-attn", "NVTE_FUSED_ATTN", "0", why))
    return rules


def _when_matches(when: Mapping[str, Any], release: Mapping[str, Any], cluster: Mapping[str, Any]) -> bool:
    facts = {
        "accelerator": str(cluster.get("accelerator") or "cpu").lower(),
        "devices_per_node": int(cluster.get("devices_per_node") or 0),
        "nodes": int(cluster.get("nodes") or 1),
        "interconnect": str(cluster.get("interconnect") or "").lower(),
        "platform": str(release.get("platform") or "").lower(),
    }
    for key, want in when.items():
        have = facts.get(key)
        options = want if isinstance(want, list) else [want]
        norm = [str(o).lower() if isinstance(have, str) else o for o in options]
        if have not in norm:
            return False
    return True


def note_rules(release: Mapping[str, Any], cluster: Mapping[str, Any]) -> list[AppliedRule]:
    out: list[AppliedRule] = []
    for i, entry in enumerate((release.get("notes") or {}).get("environment_rules") or []):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("set"), Mapping):
            continue
        if not _when_matches(entry.get("when") or {}, release, cluster):
            continue
        name = str(entry.get("name") or f"release-note-rule-{i}")
        reason = str(entry.get("reason") or "release notes")
        out.extend(AppliedRule(name, str(k), str(v), reason) for k, v in entry["set"].items())
    return out


def plan_environment(
    variant: Mapping[str, Any], release: Mapping[str, Any], cluster: Mapping[str, Any]
) -> EnvPlan:
    """The exact variables a run gets on top of the worker's environment."""
    plan = EnvPlan()
    for rule in builtin_rules(release, cluster) + note_rules(release, cluster):
        plan.env[rule.variable] = rule.value
        plan.applied.append(rule)
    for key, value in (variant.get("env") or {}).items():
        if key in plan.env and plan.env[key] != str(value):
            plan.overridden.append(str(key))
        plan.env[str(key)] = str(value)
    return plan
