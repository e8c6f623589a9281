"""`ablate release import FILE.yaml`: a release manifest file into the catalog (created or updated)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich.table import Table

from ablate.backend.cli.common import (
    DATABASE_URL,
    SERVER,
    TOKEN,
    App,
    console,
    open_database,
    read_yaml,
    settings,
)
from ablate.backend.cli.http import client, request_json
from ablate.backend.cli.hygiene import delete_release
from ablate.backend.cli.serve import prepare_database
from ablate.backend.errors import AblateError
from ablate.backend.schemas.catalog import ReleaseCreate
from ablate.backend.services import catalog

app = App(
    help="Releases of training images: list or delete them on a server, import one from a manifest file, "
    "inspect an image.",
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
    url: str | None = DATABASE_URL,
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


@app.command("list")
def list_(
    image: str | None = typer.Option(None, "--image", help="Only this image family."),
    platform: str | None = typer.Option(None, "--platform", help="Only this platform (gpu, ppu or cpu)."),
    as_json: bool = typer.Option(False, "--json", help="Print the API's JSON instead of a table."),
    server: str | None = SERVER,
    token: str | None = TOKEN,
) -> None:
    """The releases a server holds, newest first within each image."""
    params = {k: v for k, v in (("image", image), ("platform", platform)) if v}
    with client(server, token) as http:
        rows = request_json(http, "GET", "/releases", params=params)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        console.print("no releases" + (f" matching {params}" if params else ""), highlight=False)
        return
    table = Table(box=None)
    for column in ("release", "platform", "date", "created"):
        table.add_column(column, no_wrap=column == "release")
    for r in rows:
        table.add_row(
            r["ref"], r["platform"], r["release_date"] or "-", r["created_at"][:16].replace("T", " ")
        )
    console.print(table)


@app.command("inspect")
def inspect(
    image_ref: str = typer.Argument(..., help="An image reference, e.g. registry/training-nv-pytorch:25.12."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    runtime: str = typer.Option(
        "podman", "--runtime", help="The container runtime to read it with: podman or docker."
    ),
    pull: bool = typer.Option(True, "--pull/--no-pull", help="Pull the image when it is not present."),
    release: str | None = typer.Option(
        None, "--release", help="Compare with this release's declared manifest."
    ),
    store: bool = typer.Option(
        False, "--store", help="Store what the image holds in the database, by digest."
    ),
    url: str | None = DATABASE_URL,
) -> None:
    """What IMAGE_REF really holds, read from its files (no Python needed inside): every site-packages
    METADATA, /etc/os-release, versioned stack libraries (NCCL/ACCL, cuDNN, ...) and SDK version files."""
    from ablate.backend.analysis.manifest import check_declared
    from ablate.backend.services import images
    from ablate.workers.containers import ContainerConfig, ContainerError, prepare_image
    from ablate.workers.containers.manifest import read_image

    try:
        cfg = ContainerConfig.parse({"runtime": runtime, "pull": "missing" if pull else "never"})
        facts = prepare_image(cfg, image_ref)
        found = read_image(cfg, image_ref)
    except (ValueError, ContainerError) as exc:
        raise AblateError(str(exc)) from None
    digest = facts.repo_digest or facts.image_id
    checks = []
    if release or store:
        database = open_database(url)
        prepare_database(database, embedded=url is None and settings().is_embedded_sqlite)
        with database.transaction() as session:
            if release:
                declared = catalog.get_release(session, release).manifest or {}
                checks = [
                    vars(c)
                    for c in check_declared({str(k): str(v) for k, v in declared.items()}, found.components)
                ]
            if store:
                images.store_contents(
                    session, [{"digest": digest, "reference": image_ref, **found.to_dict()}]
                )
    if as_json:
        body = {"reference": image_ref, "digest": digest, "image_id": facts.image_id, **found.to_dict()}
        if release:
            body["declared_vs_found"] = checks
        typer.echo(json.dumps(body, indent=2, sort_keys=True))
        return
    console.print(f"{image_ref}  {digest}", highlight=False, soft_wrap=True)
    if not found.components:
        console.print(
            "  nothing found (no site-packages metadata, os-release, stack library or SDK version file)"
        )
    for name, version in sorted(found.components.items()):
        console.print(
            f"  {name:<32} {version:<24} {found.files.get(name, '')}", highlight=False, soft_wrap=True
        )
    if checks:
        console.print(f"declared in {release}:", highlight=False)
        for c in checks:
            mark = {"matches": "ok", "differs": "DIFFERS", "not found": "NOT FOUND"}[str(c["state"])]
            console.print(
                f"  {c['component']:<32} declared {c['declared']:<16} found {c['found'] or '-':<16} {mark}",
                highlight=False,
                soft_wrap=True,
            )
    if store:
        console.print(f"stored as {digest}", highlight=False)
