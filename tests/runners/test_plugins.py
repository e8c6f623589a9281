"""Runners and parsers found through entry points: Ablate's own, and a second distribution's, installed
into a temporary folder the way pip lays one out (a package plus its .dist-info with entry_points.txt)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from ablate.backend.domain.plugins import PARSERS_GROUP, RUNNERS_GROUP, PluginLoadError, UnknownPluginError
from ablate.backend.domain.runner import RunSpec, get_runner, known_runners
from ablate.workers.parsers import get_parser, known_parsers

TEAM_PACKAGE = '''
from ablate.backend.domain.runner import RunResult
from ablate.workers.parsers.base import LogParser


class EchoRunner:
    name = "echo"

    def supported_factors(self, accelerator):
        return set()

    def check_factors(self, factors, accelerator):
        return None

    def run(self, spec, progress=None):
        return RunResult(status="succeeded", metrics={"step_time_s": (0.25, "s")}, provenance={"by": "team"})


class NotARunner:
    pass


class StepTimeParser(LogParser):
    """Lines like ``tb step=3 time=0.5``."""

    name = "tb"

    def _feed(self, line):
        if not line.startswith("tb "):
            return []
        fields = dict(part.split("=", 1) for part in line.split()[1:])
        return self._record(int(fields["step"]), {"step_time_s": float(fields["time"])})
'''


def install_distribution(root: Path, name: str, entry_points_txt: str, package: str = "") -> None:
    """What pip leaves in site-packages for a distribution: its modules and a .dist-info folder."""
    module = name.replace("-", "_")
    if package:
        (root / module).mkdir(parents=True)
        (root / module / "__init__.py").write_text(package)
    info = root / f"{module}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points_txt))


@pytest.fixture
def team_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A team's own package, ``team-bench``, with one runner, one parser and two bad entry points."""
    site = tmp_path / "site"
    install_distribution(
        site,
        "team-bench",
        """
        [ablate.runners]
        echo = team_bench:EchoRunner
        broken = team_bench.missing:Runner
        not-a-runner = team_bench:NotARunner

        [ablate.parsers]
        tb = team_bench:StepTimeParser
        """,
        TEAM_PACKAGE,
    )
    monkeypatch.syspath_prepend(str(site))
    yield site
    sys.modules.pop("team_bench", None)


def test_ablates_own_runners_and_parsers_are_entry_points() -> None:
    runners = {ep.name: ep for ep in entry_points(group=RUNNERS_GROUP)}
    assert {"torch-llm", "command"} <= set(runners)
    assert runners["command"].dist is not None and runners["command"].dist.name == "ablate"
    parsers = {ep.name: ep for ep in entry_points(group=PARSERS_GROUP)}
    assert set(parsers) == {"deepspeed", "jsonl", "megatron", "mllog", "regex"}
    for name, ep in parsers.items():
        assert ep.load().name == name  # the entry point's name is the parser's own


def test_a_second_distributions_runner_and_parser_are_found(
    team_site: Path, make_spec: Callable[..., RunSpec]
) -> None:
    assert {"echo", "command", "torch-llm"} <= set(known_runners())
    assert "tb" in known_parsers()
    result = get_runner("echo").run(make_spec(runner="echo"))
    assert result.succeeded and result.provenance == {"by": "team"}

    # The team's parser reads a real command's log through Ablate's command runner.
    script = "for i in range(1, 5): print(f'tb step={i} time={0.5 if i > 1 else 2.0}', flush=True)"
    spec = make_spec(
        runner="command",
        parser="tb",
        warmup_steps=1,
        measured_steps=3,
        options={"command": [sys.executable, "-c", script]},
    )
    res = get_runner("command").run(spec)
    assert res.succeeded, (res.error, res.log_tail)
    assert res.metrics["step_time_s"] == (0.5, "s")
    assert res.series["step_time_s"][0] == [1, 2, 3, 4]


def test_a_fresh_interpreter_finds_the_team_runner(team_site: Path) -> None:
    code = "from ablate.backend.domain.runner import get_runner; print(get_runner('echo').name)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(team_site), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert out.stdout.strip() == "echo"


def test_unknown_names_name_the_group_and_the_known_ones(team_site: Path) -> None:
    # other tests of the session may have registered names in-process: the listed names include these
    with pytest.raises(UnknownPluginError, match=r"group 'ablate.runners'.*known runners: ") as runner:
        get_runner("nope")
    listed = str(runner.value).split("known runners: ", 1)[1]
    assert {"broken", "command", "echo", "not-a-runner", "torch-llm"} <= set(listed.split(", "))
    with pytest.raises(UnknownPluginError, match=r"group 'ablate.parsers'.*known parsers: ") as parser:
        get_parser("nope")
    assert {"deepspeed", "jsonl"} <= set(str(parser.value).split("known parsers: ", 1)[1].split(", "))


def test_an_entry_point_that_fails_to_load_says_which_and_why(team_site: Path) -> None:
    with pytest.raises(PluginLoadError) as info:
        get_runner("broken")
    message = str(info.value)
    for part in ("'broken'", "team_bench.missing:Runner", "team-bench 0.1", "ModuleNotFoundError"):
        assert part in message
    with pytest.raises(PluginLoadError, match="lacks the Runner interface"):
        get_runner("not-a-runner")


def test_one_name_from_two_distributions_is_refused(team_site: Path) -> None:
    install_distribution(team_site, "other-bench", "[ablate.runners]\necho = other_bench:Echo\n")
    with pytest.raises(PluginLoadError, match="more than one entry point") as info:
        get_runner("echo")
    assert "team-bench 0.1" in str(info.value) and "other-bench 0.1" in str(info.value)
