"""Preflight inside the run's image: does the image's own device tool (``nvidia-smi``, ``ppu-smi``) see
the run's devices when started the way the run will be (same runtime, devices and environment)?

The host's preflight (:mod:`ablate.workers.preflight`) says the node is healthy; this says the image
can use what the run was given: a missing CDI specification, a device file the cluster names wrongly,
or a stack that reads another visible-devices variable fail here, before the measured window, with
the tool's own words. A tool missing from the image is left unverified (``lenient``) or fails the node
(``strict``), as on the host.
"""

from __future__ import annotations

import subprocess

from ablate.backend.domain.runner import RunSpec, visible_devices_env
from ablate.workers import containers, preflight

TIMEOUT_S = 60.0
_MISSING = (
    "executable file not found",
    "no such file or directory",
    "not found in $path",
    "command not found",
)


def check_image_devices(lead: RunSpec, expected: int, mode: str) -> preflight.PreflightReport:
    """Run the image's device tool with the run's devices and environment; ``expected`` devices must
    be visible (GPUs: all the container sees; PPUs: those the visible-devices variable names)."""
    acc = lead.accelerator
    facts: dict[str, str] = {}
    if acc == "cpu" or mode == "off" or not lead.container:
        return preflight.PreflightReport(True, None, facts)
    tool = "nvidia-smi" if acc == "gpu" else "ppu-smi"
    query = [
        tool,
        f"--query-{'gpu' if acc == 'gpu' else 'ppu'}={preflight.QUERY}",
        "--format=csv,noheader,nounits",
    ]
    code, out, err = _in_image(lead, query)
    devices = preflight.parse_smi_csv(out) if code == 0 else []
    if not devices and acc != "gpu" and not _missing(code, err):
        code, out, err = _in_image(lead, [tool, "-L"])  # older ppu-smi: no CSV query
        devices = preflight.parse_smi_list(out, "PPU") if code == 0 else []
    if _missing(code, err):
        if mode == "strict":
            facts["preflight.image_devices"] = f"failed ({tool} not in the image)"
            return preflight.PreflightReport(
                False, f"`{tool}` is not in the image (ABLATE_PREFLIGHT=strict)", facts
            )
        facts["preflight.image_devices"] = f"unverified ({tool} not in the image)"
        return preflight.PreflightReport(True, None, facts)
    if code != 0:
        words = " ".join(f"{out}\n{err}".split())[-1000:] or "(no output)"
        facts["preflight.image_devices"] = f"failed ({tool} failed in the image)"
        return preflight.PreflightReport(False, f"`{tool}` in the image exited with {code}: {words}", facts)
    name = visible_devices_env(lead.cluster)
    visible = devices if acc == "gpu" else preflight.visible_subset(devices, lead.env.get(name or ""))
    facts["preflight.image_devices"] = ",".join(d.index for d in visible) or "none"
    reason = preflight.check_devices(expected, visible, acc.upper())
    return preflight.PreflightReport(reason is None, f"in the image: {reason}" if reason else None, facts)


def _missing(code: int, err: str) -> bool:
    return code in (126, 127) or (code != 0 and any(s in err.lower() for s in _MISSING))


def _in_image(lead: RunSpec, argv: list[str]) -> tuple[int, str, str]:
    assert lead.container is not None
    attempt = int(lead.container.get("attempt") or 1)
    name = containers.container_name(lead.run_id, attempt, lead.node_rank, None) + "-preflight"
    run = containers.ContainerRun(
        name=name,
        labels=containers.run_labels(lead.run_id, attempt),
        accelerator=lead.accelerator,
        visible_devices_env=visible_devices_env(lead.cluster),
        log_dir=lead.log_dir,
    )
    it = containers.launch(lead.container, argv, lead.env, run)
    try:
        done = subprocess.run(
            it.argv, env=it.env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        containers.remove(it.client, it.name)
        return 124, "", f"`{argv[0]}` did not answer within {TIMEOUT_S:g} s in the image"
    except OSError as exc:
        return 127, "", str(exc)
    return done.returncode, done.stdout, done.stderr
