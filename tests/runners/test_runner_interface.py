"""The runner interface: round-trips and the registry."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from ablate.backend.domain.factors import normalize_factor
from ablate.backend.domain.metrics import METRIC_UNITS
from ablate.backend.domain.runner import RunResult, RunSpec, get_runner


def _spec() -> RunSpec:
    return RunSpec(
        run_id=7,
        workload={"name": "w", "model": "tiny", "runner": "torch-llm", "runner_options": {"a": 1}},
        variant={"name": "AC2+ACCL", "factors": ["AC2", "accl"], "env": {}, "runner_options": {"a": 2}},
        cluster={"name": "local", "accelerator": "cpu", "nodes": 1, "devices_per_node": 1},
        env={"X": "1"},
    )


def test_spec_round_trip_through_json() -> None:
    spec = _spec()
    back = RunSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back == spec
    assert back.factors == ["ac2", "accl"]
    assert back.runner_options == {"a": 2}


def test_spec_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="bogus"):
        RunSpec.from_dict({**_spec().to_dict(), "bogus": 1})


def test_result_round_trip_keeps_tuples() -> None:
    res = RunResult(
        status="succeeded",
        metrics={"step_time_s": (0.5, "s")},
        series={"loss": ([1, 2], [3.0, 2.5])},
        provenance={"host": "h"},
    )
    back = RunResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert back == res
    assert isinstance(back.metrics["step_time_s"], tuple)


def test_factor_aliases() -> None:
    assert normalize_factor("CompilerOpt") == "compiler_opt"
    assert normalize_factor("ckpt-opt") == "ckpt_opt"


def test_unknown_runner_lists_known() -> None:
    with pytest.raises(ValueError, match="torch-llm"):
        get_runner("nope")


def test_metric_units_are_the_agreed_ones() -> None:
    assert METRIC_UNITS["mfu"] == "ratio"
    assert METRIC_UNITS["throughput_tokens_per_s_per_device"] == "tokens/s/device"


def test_builtin_runners_satisfy_the_protocol() -> None:
    from ablate.backend.domain.runner import Runner, known_runners

    # other suites may register runners of their own (the dispatcher tests' "fake")
    assert {"command", "torch-llm"} <= set(known_runners())
    for name in ("command", "torch-llm"):
        runner = get_runner(name)
        assert isinstance(runner, Runner) and runner.name == name


def test_importing_the_interface_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys, ablate.backend.domain.runner as r; r.get_runner('torch-llm'); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "provenance",
    [{"host": "h", "cpus": 8, "ok": True, "gone": None}, {"host": "h", "gpus": [{"id": 0, "uuid": "GPU-1"}]}],
)
def test_result_to_dict_is_a_copy_sharing_nothing(provenance: dict) -> None:
    """to_dict gives what asdict gives (metrics and series as lists), and nothing of the result's
    mutable state: a runner that changes its result later must not change what was sent."""
    res = RunResult(
        status="failed",
        metrics={"step_time_s": (0.5, "s")},
        series={"loss": ([1, 2], [3.0, 2.5])},
        provenance=provenance,
        error="boom",
        failure_kind="benchmark",
        environment={"X": "1"},
        better={"m": "lower"},
    )
    plain = res.to_dict()
    expected = asdict(res)
    expected["metrics"] = {k: list(v) for k, v in expected["metrics"].items()}
    expected["series"] = {k: [list(s), list(v)] for k, (s, v) in expected["series"].items()}
    assert plain == expected
    res.provenance["host"] = "changed"
    res.environment["X"] = "2"
    if "gpus" in provenance:
        res.provenance["gpus"][0]["id"] = 9
    assert plain["provenance"] == expected["provenance"] and plain["environment"] == {"X": "1"}
