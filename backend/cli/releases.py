"""`ablate release import FILE.yaml`: a release manifest file into the catalog (created or updated)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from ablate.backend.cli.common import App, console, open_database, read_yaml, settings
from ablate.backend.cli.hygiene import delete_release
from ablate.backend.cli.serve import prepare_database
from ablate.backend.errors import AblateError
from ablate.backend.schemas.catalog import ReleaseCreate
from ablate.backend.services import catalog

app = App(
    help="Releases of training images: import from a manifest file, delete one on a server.",
    no_args_is_help=True,
)


def load_release_file(path: Path) -> ReleaseCreate:
    """Parse and validate a release file; errors name the file and the field."""
    data: Any = read_yaml(path)
    if not isinstance(data, dict):
        raise AblateError(f"{path}: expected a mapping with image, tag, platform, ...")
    if isinstance(data.get("tag"), float):
        # YAML reads 25.10 as the number 25.1: the tag is lost before we see it, so ask for quotes.
        raise AblateError(f'{path}: tag: quote it (tag: "{data["tag"]}" is what YAML read)')
    if isinstance(data.get("tag"), int):
        data["tag"] = str(data["tag"])
    for section in ("manifest", "driver_requirements"):
        entries = data.get(section)
        if not isinstance(entries, dict):
            continue
        for name, version in entries.items():
            if isinstance(version, float):
                raise AblateError(
                    f'{path}: {section}.{name}: quote it ({name}: "{version}" is what YAML read; '
                    f"a version such as 2.10 must be written as a string)"
                )
            if isinstance(version, int) and not isinstance(version, bool):
                entries[name] = str(version)
    try:
        return ReleaseCreate.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "file"
        raise AblateError(f"{path}: {loc}: {first['msg']}") from None


@app.command("import")
def import_(
    file: Path = typer.Argument(..., help="YAML: image, tag, platform, release_date, manifest, notes, ..."),
    url: str | None = typer.Option(None, "--url", help="Database URL (default: ABLATE_DATABASE_URL)."),
) -> None:
    """Create the release from FILE, or merge FILE into it: entries the file lacks are kept, what
    changed is printed."""
    spec = load_release_file(file)
    database = open_database(url)
    prepare_database(database, embedded=url is None and settings().is_embedded_sqlite)
    with database.transaction() as session:
        done = catalog.import_release(session, spec)
        ref, changes = done.release.ref, done.changes
    if done.created:
        console.print(f"created release {ref}", highlight=False, soft_wrap=True)
    elif not changes:
        console.print(
            f"release {ref} is unchanged (everything in {file} is already recorded)", highlight=False
        )
    else:
        console.print(f"merged {file} into release {ref}:", highlight=False, soft_wrap=True)
        for change in changes:
            console.print(f"  {change}", highlight=False, soft_wrap=True)


app.command("delete")(delete_release)
