"""`ablate demo`: a real ablation study of a tiny llama-style model on this machine's CPUs.

The study is the 2x2 factorial plan of ``examples/plans/cpu-factorial-tiny.yaml`` (Base,
+CompilerOpt, +CkptOpt, +CompilerOpt+CkptOpt, 3 repeats). Each demo gets a release of its own
(``ablate-demo:0.1``, ``0.2``, ...), so a second demo compares itself against the first.
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

import ablate.examples
from ablate.backend.db.models import Release, Study
from ablate.backend.errors import AblateError
from ablate.backend.schemas.catalog import ReleaseCreate
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import catalog, studies

EXAMPLES_DIR = Path(ablate.examples.__file__).resolve().parent
RELEASE_FILE = EXAMPLES_DIR / "demo" / "release.yaml"
PLAN_FILE = EXAMPLES_DIR / "plans" / "cpu-factorial-tiny.yaml"


def _load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AblateError(f"the demo needs {path} (installed with Ablate): {exc.strerror}") from None
    if not isinstance(data, dict):
        raise AblateError(f"{path}: expected a mapping")
    return data


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def next_tag(existing: list[str]) -> str:
    """``0.1``, ``0.2``, ...: one more than the newest demo release."""
    minors = [
        int(t.split(".", 1)[1]) for t in existing if t.startswith("0.") and t.split(".", 1)[1].isdigit()
    ]
    return f"0.{max(minors, default=0) + 1}"


def demo_release(session: Session) -> ReleaseCreate:
    data = _load_yaml(RELEASE_FILE)
    image = str(data["image"])
    tags = list(session.scalars(select(Release.tag).where(Release.image == image)))
    data["tag"] = next_tag(tags)
    # The demo's "image" is this machine's Python environment: record what it really holds.
    manifest = {
        "python": platform.python_version(),
        **{name: v for name in ("torch", "numpy") if (v := _version(name)) is not None},
    }
    data["manifest"] = {**(data.get("manifest") or {}), **manifest}
    return ReleaseCreate.model_validate(data)


def demo_plan(release_ref: str, *, repeats: int | None = None) -> StudyPlan:
    data = _load_yaml(PLAN_FILE)
    data["release"] = release_ref
    data["name"] = f"demo: {data.get('name', 'factorial')}"
    data["created_by"] = "ablate demo"
    if repeats is not None:
        data["repeats"] = repeats
    return StudyPlan.model_validate(data)


def create_demo_study(session: Session, *, repeats: int | None = None) -> Study:
    """Register the next demo release and queue its study, in the caller's transaction."""
    release = catalog.create_release(session, demo_release(session))
    return studies.create_study(session, demo_plan(release.ref, repeats=repeats))


def python_summary() -> str:
    torch = _version("torch")
    if torch is None:
        raise AblateError(
            "the demo trains a real model and needs PyTorch: pip install -e '.[bench]' "
            "(on this kind of machine: pip install torch==2.13.0 first)"
        )
    return f"Python {platform.python_version()} on {sys.platform}, torch {torch}"
