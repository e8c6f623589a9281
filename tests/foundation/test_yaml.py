"""YAML files (release manifests, study plans) are read without YAML 1.1's silent rewrites (issue
30): ``010`` is 8, ``0x10`` 16, ``12:30`` 750 and ``on`` True to PyYAML, so such plain scalars are
refused with the "quote it" message the ``2.10`` versions already get. Control characters in
manifest values and dates that are not calendar dates are refused with one clear line, never a
traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ablate.backend.cli.common import read_yaml
from ablate.backend.cli.releases import load_release_file
from ablate.backend.errors import AblateError
from tests.examples.helpers import ablate

RELEASE = """\
image: training-nv-pytorch
tag: "25.12"
platform: gpu
release_date: 2025-12-15
manifest:
  torch: 2.9.0
  vllm: "0.12.0"
"""


def _release(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "release.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("line", "where", "read_as"),
    [
        ("  nccl: 010", "manifest.nccl", "8"),
        ("  nccl: 0x10", "manifest.nccl", "16"),
        ("  nccl: 12:30", "manifest.nccl", "750"),
        ("  nccl: 1_000", "manifest.nccl", "1000"),
        ("  nccl: +12", "manifest.nccl", "12"),
        ("  nccl: 1:30.5", "manifest.nccl", "90.5"),
        ("  nccl: on", "manifest.nccl", "True"),
        ("  nccl: off", "manifest.nccl", "False"),
        ("  nccl: yes", "manifest.nccl", "True"),
        ("  on: 1.2.3", "manifest.on", "True"),
    ],
)
def test_yaml_1_1_rewrites_are_refused_asking_for_quotes(
    tmp_path: Path, line: str, where: str, read_as: str
) -> None:
    path = _release(tmp_path, RELEASE + line + "\n")
    with pytest.raises(AblateError) as err:
        load_release_file(path)
    message = str(err.value)
    assert message.startswith(f"{path}: {where}: quote it"), message
    assert "line 8" in message and read_as in message, message
    # Quoted, the text is kept exactly as written.
    key, _, value = line.strip().partition(": ")
    quoted = _release(tmp_path, RELEASE + f'  "{key}": "{value}"\n')
    assert load_release_file(quoted).manifest[key] == value


def test_plain_integers_and_yaml_1_2_booleans_are_kept(tmp_path: Path) -> None:
    path = _release(tmp_path, RELEASE + "  nccl: 10\n  cudnn: -3\n")
    assert load_release_file(path).manifest == {
        "torch": "2.9.0",
        "vllm": "0.12.0",
        "nccl": "10",
        "cudnn": "-3",
    }
    plan = tmp_path / "plan.yaml"
    plan.write_text("repeats: 3\nadaptive: true\nthreshold: 0.5\nname: null\nseed: 0\n", encoding="utf-8")
    assert read_yaml(plan) == {"repeats": 3, "adaptive": True, "threshold": 0.5, "name": None, "seed": 0}
    plan.write_text("adaptive: on\n", encoding="utf-8")
    with pytest.raises(AblateError, match=r"adaptive: quote it.*True"):
        read_yaml(plan)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('"2.9\\0"', "manifest.torch"),
        ('"2.9\\x01"', "manifest.torch"),
        ('"2.9\\n1"', "manifest.torch"),
        ('"2.9\\x7f"', "manifest.torch"),
    ],
)
def test_control_characters_in_manifest_values_are_refused(tmp_path: Path, value: str, expected: str) -> None:
    path = _release(tmp_path, RELEASE.replace("torch: 2.9.0", f"torch: {value}"))
    with pytest.raises(AblateError, match=rf"{expected}: .*control character"):
        load_release_file(path)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0", "a date as YYYY-MM-DD"),
        ("1765756800", "a date as YYYY-MM-DD"),
        ('"1765756800"', "a date as YYYY-MM-DD"),
        ("2025-13-01", "month"),
        ("2025-02-30", "day"),
        ("2025-12-15T10:00:00Z", "a date as YYYY-MM-DD"),
    ],
)
def test_release_dates_are_calendar_dates(tmp_path: Path, value: str, why: str) -> None:
    path = _release(tmp_path, RELEASE.replace("release_date: 2025-12-15", f"release_date: {value}"))
    with pytest.raises(AblateError) as err:
        load_release_file(path)
    assert str(err.value).startswith(f"{path}: release_date: "), err.value
    assert why in str(err.value), err.value


def test_the_cli_says_one_line_for_month_13(tmp_path: Path) -> None:
    path = _release(tmp_path, RELEASE.replace("2025-12-15", "2025-13-01"))
    proc: subprocess.CompletedProcess[str] = ablate("release", "import", str(path), "--url", "sqlite://")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "release_date" in proc.stderr and "month" in proc.stderr, (
        proc.stderr
    )


@pytest.mark.parametrize(
    ("text", "where"),
    [("a: [1, 2\nb: 3\n", "line 2, column 2"), ("a: 1\n  b: 2\n", "line 2, column 4"), ("a: 'x\n", "line 2")],
)
def test_syntax_errors_say_line_and_column(tmp_path: Path, text: str, where: str) -> None:
    """A YAML syntax error is one line that still says where (PyYAML puts the place on a later line)."""
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(AblateError) as err:
        read_yaml(path)
    message = str(err.value)
    assert message.startswith(f"{path}: not valid YAML: ") and where in message, message
    assert "\n" not in message
